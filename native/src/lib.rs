//! ``streamflow._native``: a columnar Avro batch codec.
//!
//! One ``Codec`` per reader schema and wire format. ``decode`` reads the headers
//! with the GIL held (a writer seen for the first time is looked up through the
//! Python ``resolver`` and compiled once), runs the decode loop with the GIL
//! released, then builds the numpy columns. Each record fails alone; nothing
//! a record holds can make the process panic across the FFI boundary, and a
//! panic that would is caught and reported as that record's error.

mod builders;
mod columns;
mod decode;
mod encode;
mod fill;
mod nd;
mod resolve;
mod schema;
mod value;
mod wire;

use builders::Builder;
use columns::Layout;
use decode::{Cursor, Decoder};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use resolve::{Convs, Program};
use schema::Schema;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use value::ToPy;
use wire::Wire;

/// A compiled writer: its schema, its program against the reader, and its size check.
struct Writer {
    schema: Schema,
    program: Program,
    /// bodies longer than this are checked by ``refuse`` before they are decoded
    walk_above: i64,
    /// ``refuse(data, start) -> str | None``: bounds.py's walk, for the long ones
    refuse: PyObject,
    /// why the reader cannot read this writer, said instead of a decode error
    unresolvable: Option<String>,
}

#[pyclass(module = "streamflow._native")]
struct Codec {
    name: String,
    wire: Wire,
    reader: Schema,
    layout: Layout,
    keys: Vec<String>,
    logical_readers: Py<PyDict>,
    logical_writers: Py<PyDict>,
    /// ``resolver(key) -> (raw writer schema, walk_above, refuse, unresolvable) | str``
    resolver: PyObject,
    writers: HashMap<u64, Writer>,
    convs: Convs,
    conv_funcs: Vec<(PyObject, PyObject)>,
    max_items: u64,
}

/// One record's place in a batch: what wrote it and where its body starts, or why not.
enum Job<'a> {
    Decode {
        index: usize,
        key: u64,
        data: &'a [u8],
        start: usize,
    },
    Failed(usize, String),
}

#[pymethods]
impl Codec {
    #[new]
    #[pyo3(signature = (raw, *, name, wire, logical_readers, logical_writers, resolver, max_items))]
    fn new(
        raw: &Bound<'_, PyAny>,
        name: String,
        wire: &str,
        logical_readers: Bound<'_, PyDict>,
        logical_writers: Bound<'_, PyDict>,
        resolver: PyObject,
        max_items: u64,
    ) -> PyResult<Self> {
        let wire = Wire::parse(wire)
            .ok_or_else(|| PyValueError::new_err(format!("unknown wire {wire:?}")))?;
        let keys: Vec<String> = logical_readers.keys().extract()?;
        let reader = Schema::compile(raw, &keys).map_err(PyValueError::new_err)?;
        if !matches!(reader.get(reader.root).kind, schema::Kind::Record(_)) {
            return Err(PyValueError::new_err("the schema is not a record"));
        }
        let layout = Layout::of(&reader);
        Ok(Codec {
            name,
            wire,
            reader,
            layout,
            keys,
            logical_readers: logical_readers.unbind(),
            logical_writers: logical_writers.unbind(),
            resolver,
            writers: HashMap::new(),
            convs: Vec::new(),
            conv_funcs: Vec::new(),
            max_items,
        })
    }

    /// The flattened layout: ``(path, kind, nullable)`` per column.
    fn columns(&self) -> Vec<(String, String, bool)> {
        self.layout
            .cols
            .iter()
            .map(|c| {
                let kind = match c.kind {
                    columns::ColKind::Num(_) => "num".to_string(),
                    columns::ColKind::Time(unit) => format!("time:{unit}"),
                    columns::ColKind::Nd(_, d) => format!("nd:{d}"),
                    columns::ColKind::Obj => "obj".to_string(),
                };
                (c.path.clone(), kind, c.nullable)
            })
            .collect()
    }

    /// The layout for ``encode``: ``(path, node, is a flattened record)`` in write order.
    fn entries(&self) -> Vec<(String, usize, bool)> {
        self.layout
            .entries
            .iter()
            .map(|e| (e.path.clone(), e.node, e.record))
            .collect()
    }

    /// Why ``encode`` cannot be native for this schema, or None.
    fn encode_unsupported(&self) -> Option<String> {
        self.reader.first_general_union()
    }

    /// Decode a list of ``bytes``: ``("ok", rows, errors, columns, late)`` or
    /// ``("fallback", reason)`` when a writer met here is one the native path does not cover.
    fn decode<'py>(
        &mut self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let owned: Vec<Bound<'py, PyBytes>> = values
            .iter()
            .map(|v| {
                v.downcast_into::<PyBytes>()
                    .map_err(|_| PyValueError::new_err("values must be bytes"))
            })
            .collect::<PyResult<_>>()?;
        let mut jobs = Vec::with_capacity(owned.len());
        let mut refused: HashMap<u64, String> = HashMap::new();
        for (index, b) in owned.iter().enumerate() {
            let data = b.as_bytes();
            let (key, start) = match self.wire.read(data) {
                Ok(h) => h,
                Err(why) => {
                    jobs.push(Job::Failed(index, why));
                    continue;
                }
            };
            if !self.writers.contains_key(&key) && !refused.contains_key(&key) {
                if let Some(why) = self.learn(py, key)? {
                    if let Some(reason) = why.strip_prefix("fallback:") {
                        return PyTuple::new(
                            py,
                            [
                                "fallback".into_pyobject(py)?.into_any(),
                                PyString::new(py, reason).into_any(),
                                key.into_pyobject(py)?.into_any(),
                            ],
                        );
                    }
                    refused.insert(key, why);
                }
            }
            if let Some(why) = refused.get(&key) {
                jobs.push(Job::Failed(index, why.clone()));
                continue;
            }
            let writer = &self.writers[&key];
            if (data.len() - start) as i64 > writer.walk_above {
                let answer = writer.refuse.call1(py, (b, start))?;
                if !answer.is_none(py) {
                    jobs.push(Job::Failed(index, answer.extract(py)?));
                    continue;
                }
            }
            jobs.push(Job::Decode {
                index,
                key,
                data,
                start,
            });
        }
        let this = &*self;
        let (rows, errors, builders) = py.allow_threads(|| this.run(jobs));
        let conv = ToPy {
            py,
            reader: &self.reader,
            convs: &self.conv_funcs,
        };
        let mut late = Vec::new();
        let cols = PyList::empty(py);
        for (spec, builder) in self.layout.cols.iter().zip(builders) {
            let col = builder.finish(&conv, &mut late)?;
            cols.append((spec.path.as_str(), col))?;
        }
        let late: Vec<(usize, String)> = late
            .into_iter()
            .map(|(pos, why)| (pos, format!("cannot decode {}: {why}", self.name)))
            .collect();
        PyTuple::new(
            py,
            [
                "ok".into_pyobject(py)?.into_any(),
                builders::rows(py, rows),
                errors.into_pyobject(py)?.into_any(),
                cols.into_any(),
                late.into_pyobject(py)?.into_any(),
            ],
        )
    }

    /// Encode columns: ``units`` is ``[(node, kind, data, mask)]`` in write order (see
    /// ``entries``); returns ``(values, errors)`` with None where a record failed.
    fn encode<'py>(
        &self,
        py: Python<'py>,
        units: &Bound<'py, PyList>,
        n: usize,
        header: &[u8],
    ) -> PyResult<encode::Encoded<'py>> {
        let enc = encode::Encoder {
            py,
            schema: &self.reader,
            writers: self.logical_writers.bind(py),
            name: &self.name,
        };
        enc.encode(units, n, header)
    }
}

impl Codec {
    /// Look up and compile the writer with this key; why its records cannot be read, or
    /// ``fallback:<reason>`` when fastavro must decode the batch.
    fn learn(&mut self, py: Python<'_>, key: u64) -> PyResult<Option<String>> {
        let answer = self.resolver.call1(py, (key,))?;
        let answer = answer.bind(py);
        if let Ok(why) = answer.extract::<String>() {
            return Ok(Some(why));
        }
        let (raw, walk_above, refuse, unresolvable): (
            Bound<'_, PyAny>,
            i64,
            PyObject,
            Option<String>,
        ) = answer.extract()?;
        let schema = match Schema::compile(&raw, &self.keys) {
            Ok(s) => s,
            Err(why) => return Ok(Some(format!("fallback:the writer schema: {why}"))),
        };
        let program = match resolve::compile(py, &schema, &self.reader, &mut self.convs) {
            Ok(p) => p,
            Err(resolve::Unsupported(why)) => return Ok(Some(format!("fallback:{why}"))),
        };
        let readers = self.logical_readers.bind(py);
        for (key, node) in &self.convs[self.conv_funcs.len()..] {
            let func = readers
                .get_item(key)?
                .ok_or_else(|| PyValueError::new_err(format!("no reader for {key}")))?;
            self.conv_funcs.push((func.unbind(), node.clone_ref(py)));
        }
        self.writers.insert(
            key,
            Writer {
                schema,
                program,
                walk_above,
                refuse,
                unresolvable,
            },
        );
        Ok(None)
    }

    /// The decode loop, without the GIL: rows that decoded, errors, and the columns.
    fn run(&self, jobs: Vec<Job<'_>>) -> (Vec<i64>, Vec<(usize, String)>, Vec<Builder>) {
        let mut builders: Vec<Builder> = self.layout.cols.iter().map(Builder::new).collect();
        let mut sink = fill::Sink::new(&mut builders);
        let mut rows = Vec::with_capacity(jobs.len());
        let mut errors = Vec::new();
        for job in jobs {
            let (index, key, data, start) = match job {
                Job::Failed(index, why) => {
                    errors.push((index, why));
                    continue;
                }
                Job::Decode {
                    index,
                    key,
                    data,
                    start,
                } => (index, key, data, start),
            };
            let writer = &self.writers[&key];
            let decoder = Decoder {
                program: &writer.program,
                writer: &writer.schema,
                max_items: self.max_items,
            };
            let mut cur = Cursor { data, pos: start };
            let (root, slots, cols) = (writer.program.root, &self.layout.slots, &self.layout.cols);
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                decoder.fill(root, slots, cols, &mut cur, 0, &mut sink)
            }));
            let reason = match outcome {
                Ok(Ok(())) if cur.pos != data.len() => {
                    self.wire.trailing(&self.name, key, data.len() - cur.pos)
                }
                Ok(Ok(())) => {
                    sink.commit();
                    rows.push(index as i64);
                    continue;
                }
                Ok(Err(decode::Error::Invalid(_))) if writer.unresolvable.is_some() => {
                    writer.unresolvable.clone().unwrap_or_default()
                }
                Ok(Err(e)) => self.wire.reason(&self.name, key, data.len(), &e),
                Err(_) => format!(
                    "cannot decode {}: an internal error in the native decoder",
                    self.name
                ),
            };
            sink.rollback();
            errors.push((index, reason));
        }
        drop(sink);
        (rows, errors, builders)
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Codec>()?;
    Ok(())
}
