//! The builders that fill a batch's columns, and the Python objects they become.
//!
//! A builder takes each decoded record's value for its column (already of the
//! reader's type) without the GIL, or, for an n-d column, the numbers that
//! nd.rs read straight into it and then the record's shape; ``finish`` then
//! makes the numpy array, the mask, or the list of Python values, with the GIL
//! held again.

use crate::columns::{ColKind, ColSpec, Num};
use crate::value::{ToPy, Value};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyList, PySlice, PyTuple};

pub enum Data {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Obj(Vec<Value>),
}

pub struct Builder {
    kind: ColKind,
    data: Data,
    mask: Vec<bool>,
    /// per record of an n-d column: its shape (``depth`` numbers; zeros where it is ragged)
    shapes: Vec<usize>,
    /// per record of an n-d column: whether its arrays are a rectangle (else it is in ``ragged``)
    whole: Vec<bool>,
    ragged: Vec<Value>,
}

impl Builder {
    pub fn new(spec: &ColSpec) -> Builder {
        let data = match spec.kind {
            ColKind::Num(n) | ColKind::Nd(n, _) => match n {
                Num::Bool => Data::Bool(Vec::new()),
                Num::I32 => Data::I32(Vec::new()),
                Num::I64 => Data::I64(Vec::new()),
                Num::F32 => Data::F32(Vec::new()),
                Num::F64 => Data::F64(Vec::new()),
            },
            ColKind::Time(_) => Data::I64(Vec::new()),
            ColKind::Obj => Data::Obj(Vec::new()),
        };
        Builder {
            kind: spec.kind,
            data,
            mask: Vec::new(),
            shapes: Vec::new(),
            whole: Vec::new(),
            ragged: Vec::new(),
        }
    }

    /// How many numbers an n-d column holds so far (to drop a failed record's with ``truncate``).
    pub fn filled(&self) -> usize {
        match &self.data {
            Data::Bool(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::Obj(v) => v.len(),
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match &mut self.data {
            Data::Bool(v) => v.truncate(len),
            Data::I32(v) => v.truncate(len),
            Data::I64(v) => v.truncate(len),
            Data::F32(v) => v.truncate(len),
            Data::F64(v) => v.truncate(len),
            Data::Obj(v) => v.truncate(len),
        }
    }

    /// The flat numbers of an n-d column, for a record read straight into them.
    pub fn data(&mut self) -> &mut Data {
        &mut self.data
    }

    /// Close a record whose numbers were read straight into ``data``: its shape.
    pub fn push_shape(&mut self, dims: &[usize]) {
        self.shapes.extend_from_slice(dims);
        self.whole.push(true);
    }

    /// Add one record's value (already of the reader's type: the program promoted it).
    pub fn push(&mut self, v: Value) {
        match self.kind {
            ColKind::Obj => {
                if let Data::Obj(out) = &mut self.data {
                    out.push(v);
                }
            }
            ColKind::Nd(_, depth) => {
                let mut shape = Vec::with_capacity(depth);
                if rectangular(&v, depth, &mut shape) {
                    flatten(&v, &mut self.data);
                    self.push_shape(&shape);
                } else {
                    self.shapes.resize(self.shapes.len() + depth, 0);
                    self.whole.push(false);
                    self.ragged.push(v);
                }
            }
            ColKind::Num(_) | ColKind::Time(_) => {
                let v = if let Value::Logical(_, inner) = v {
                    *inner
                } else {
                    v
                };
                self.mask.push(matches!(v, Value::Null));
                scalar(&v, &mut self.data);
            }
        }
    }

    /// The column for Python: ``(kind, data, mask or None, extra)``; an object column's
    /// values that fastavro's converters refuse are reported by position in ``bad``.
    pub fn finish<'py>(
        mut self,
        conv: &ToPy<'_, 'py>,
        bad: &mut Vec<(usize, String)>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = conv.py;
        let mask = if self.mask.iter().any(|m| *m) {
            PyArray1::from_vec(py, std::mem::take(&mut self.mask)).into_any()
        } else {
            py.None().into_bound(py)
        };
        match self.kind {
            ColKind::Obj => {
                let Data::Obj(values) = self.data else {
                    unreachable!("an object column holds values")
                };
                let list = PyList::empty(py);
                for (i, v) in values.iter().enumerate() {
                    match conv.object(v) {
                        Ok(o) => list.append(o)?,
                        Err(e) => {
                            bad.push((i, one_line(py, &e)));
                            list.append(py.None())?;
                        }
                    }
                }
                PyTuple::new(
                    py,
                    [
                        "obj".into_pyobject(py)?.into_any(),
                        list.into_any(),
                        mask,
                        py.None().into_bound(py),
                    ],
                )
            }
            ColKind::Time(unit) => PyTuple::new(
                py,
                [
                    "time".into_pyobject(py)?.into_any(),
                    array(py, self.data),
                    mask,
                    unit.into_pyobject(py)?.into_any(),
                ],
            ),
            ColKind::Num(_) => PyTuple::new(
                py,
                [
                    "num".into_pyobject(py)?.into_any(),
                    array(py, self.data),
                    mask,
                    py.None().into_bound(py),
                ],
            ),
            ColKind::Nd(_, depth) => self.finish_nd(conv, depth),
        }
    }

    fn finish_nd<'py>(self, conv: &ToPy<'_, 'py>, depth: usize) -> PyResult<Bound<'py, PyTuple>> {
        let py = conv.py;
        let first = match (self.whole.first(), self.shapes.get(..depth)) {
            (Some(true), Some(dims)) => dims.to_vec(),
            _ => vec![0; depth],
        };
        let same = self.whole.iter().all(|w| *w)
            && self
                .shapes
                .chunks_exact(depth)
                .all(|s| s == first.as_slice());
        let flat = array(py, self.data);
        if same {
            let mut dims = vec![self.whole.len()];
            dims.extend(&first);
            let shaped = flat.call_method1("reshape", (PyTuple::new(py, dims)?,))?;
            return PyTuple::new(
                py,
                [
                    "nd".into_pyobject(py)?.into_any(),
                    shaped,
                    py.None().into_bound(py),
                    py.None().into_bound(py),
                ],
            );
        }
        // shapes differ: one numpy array per record (a nested list where a record is ragged)
        let list = PyList::empty(py);
        let (mut at, mut ragged) = (0usize, self.ragged.iter());
        for (whole, dims) in self.whole.iter().zip(self.shapes.chunks_exact(depth)) {
            if *whole {
                let size: usize = dims.iter().product();
                let part = flat.call_method1(
                    "__getitem__",
                    (PySlice::new(py, at as isize, (at + size) as isize, 1),),
                )?;
                list.append(part.call_method1("reshape", (PyTuple::new(py, dims)?,))?)?;
                at += size;
            } else {
                list.append(conv.object(ragged.next().unwrap_or(&Value::Null))?)?;
            }
        }
        PyTuple::new(
            py,
            [
                "ndobj".into_pyobject(py)?.into_any(),
                list.into_any(),
                py.None().into_bound(py),
                py.None().into_bound(py),
            ],
        )
    }
}

pub fn one_line(py: Python<'_>, e: &PyErr) -> String {
    let name = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Error".into());
    let text = e.value(py).to_string();
    let first = text
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect::<String>();
    if first.is_empty() {
        name
    } else {
        format!("{name}: {first}")
    }
}

fn array(py: Python<'_>, data: Data) -> Bound<'_, PyAny> {
    match data {
        Data::Bool(v) => PyArray1::from_vec(py, v).into_any(),
        Data::I32(v) => PyArray1::from_vec(py, v).into_any(),
        Data::I64(v) => PyArray1::from_vec(py, v).into_any(),
        Data::F32(v) => PyArray1::from_vec(py, v).into_any(),
        Data::F64(v) => PyArray1::from_vec(py, v).into_any(),
        Data::Obj(_) => py.None().into_bound(py),
    }
}

fn scalar(v: &Value, data: &mut Data) {
    match (data, v) {
        (Data::Bool(d), Value::Bool(b)) => d.push(*b),
        (Data::I32(d), Value::Int(i)) => d.push(*i),
        (Data::I64(d), Value::Long(i)) => d.push(*i),
        (Data::I64(d), Value::Int(i)) => d.push(*i as i64), // a date's days
        (Data::F32(d), Value::Float(f)) => d.push(*f),
        (Data::F64(d), Value::Double(f)) => d.push(*f),
        // null (masked), or a value the program did not promote: a placeholder either way
        (Data::Bool(d), _) => d.push(false),
        (Data::I32(d), _) => d.push(0),
        (Data::I64(d), _) => d.push(0),
        (Data::F32(d), _) => d.push(0.0),
        (Data::F64(d), _) => d.push(0.0),
        (Data::Obj(d), v) => d.push(v.clone()),
    }
}

/// Whether nested arrays are a rectangle ``depth`` levels deep; its shape into ``shape``.
fn rectangular(v: &Value, depth: usize, shape: &mut Vec<usize>) -> bool {
    let mut level = vec![v];
    for _ in 0..depth {
        let mut len = None;
        let mut next = Vec::new();
        for item in level {
            let Value::Array(items) = item else {
                return false;
            };
            if *len.get_or_insert(items.len()) != items.len() {
                return false;
            }
            next.extend(items.iter());
        }
        shape.push(len.unwrap_or(0));
        if next.is_empty() {
            // an empty level: the deeper dimensions are 0 as far as anyone can tell
            shape.resize(depth, 0);
            return true;
        }
        level = next;
    }
    true
}

fn flatten(v: &Value, data: &mut Data) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, data)),
        other => scalar(other, data),
    }
}

/// The numpy array of the rows that decoded, as int64.
pub fn rows(py: Python<'_>, rows: Vec<i64>) -> Bound<'_, PyAny> {
    PyArray1::from_vec(py, rows).into_any()
}
