//! A decoded value held in Rust while the GIL is released, and its Python form.
//!
//! The Python objects are built after the decode loop, with the GIL held again,
//! and are exactly what fastavro's ``schemaless_reader`` returns: dicts for
//! records and maps, lists for arrays, ``str`` for enum symbols, and logical
//! values converted by fastavro's own functions.

use crate::schema::{Id, Kind, Schema};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString};

#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Bytes(Vec<u8>),
    Str(String),
    /// (the reader's enum node, the symbol's index in it)
    Enum(Id, u32),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
    /// (the reader's record node, its fields in the reader's order)
    Record(Id, Vec<Value>),
    /// (the converter's index, the underlying value)
    Logical(u32, Box<Value>),
}

/// What Python needs to turn values into objects: the reader schema and the converters.
pub struct ToPy<'a, 'py> {
    pub py: Python<'py>,
    pub reader: &'a Schema,
    /// per converter: fastavro's reader function and the schema node it is given
    pub convs: &'a [(PyObject, PyObject)],
}

impl ToPy<'_, '_> {
    pub fn object(&self, v: &Value) -> PyResult<PyObject> {
        let py = self.py;
        Ok(match v {
            Value::Null => py.None(),
            Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
            Value::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
            Value::Long(i) => i.into_pyobject(py)?.into_any().unbind(),
            Value::Float(f) => PyFloat::new(py, *f as f64).into_any().unbind(),
            Value::Double(f) => PyFloat::new(py, *f).into_any().unbind(),
            Value::Bytes(b) => PyBytes::new(py, b).into_any().unbind(),
            Value::Str(s) => PyString::new(py, s).into_any().unbind(),
            Value::Enum(node, i) => match &self.reader.get(*node).kind {
                Kind::Enum { symbols, .. } => {
                    PyString::new(py, &symbols[*i as usize]).into_any().unbind()
                }
                _ => return Err(PyValueError::new_err("an enum value of a non-enum node")),
            },
            Value::Array(items) => {
                let list = PyList::empty(py);
                for item in items {
                    list.append(self.object(item)?)?;
                }
                list.into_any().unbind()
            }
            Value::Map(entries) => {
                let dict = PyDict::new(py);
                for (k, item) in entries {
                    dict.set_item(k, self.object(item)?)?;
                }
                dict.into_any().unbind()
            }
            Value::Record(node, fields) => {
                let Kind::Record(names) = &self.reader.get(*node).kind else {
                    return Err(PyValueError::new_err("a record value of a non-record node"));
                };
                let dict = PyDict::new(py);
                for (field, item) in names.iter().zip(fields) {
                    dict.set_item(&field.name, self.object(item)?)?;
                }
                dict.into_any().unbind()
            }
            Value::Logical(conv, inner) => {
                let (func, node) = &self.convs[*conv as usize];
                func.call1(py, (self.object(inner)?, node, node))?
            }
        })
    }
}

/// A reader field's default (JSON, as the schema holds it) as a value of the field's type.
///
/// Avro writes a bytes or fixed default as text whose code points are the bytes; a
/// union's default is for its first branch.
pub fn from_default(schema: &Schema, id: Id, d: &Bound<'_, PyAny>) -> Result<Value, String> {
    let node = schema.get(id);
    if node.logical.is_some() {
        return Err("a default of a logical type".into());
    }
    let wrong = || format!("{d} is not a {}", kind_label(&node.kind));
    let is_bool = d.is_instance_of::<PyBool>();
    Ok(match &node.kind {
        Kind::Null if d.is_none() => Value::Null,
        Kind::Boolean if is_bool => Value::Bool(d.extract().map_err(|_| wrong())?),
        Kind::Int if !is_bool => Value::Int(d.extract().map_err(|_| wrong())?),
        Kind::Long if !is_bool => Value::Long(d.extract().map_err(|_| wrong())?),
        Kind::Float if !is_bool => Value::Float(d.extract::<f64>().map_err(|_| wrong())? as f32),
        Kind::Double if !is_bool => Value::Double(d.extract().map_err(|_| wrong())?),
        Kind::String => Value::Str(d.extract().map_err(|_| wrong())?),
        Kind::Bytes | Kind::Fixed(_) => {
            let text: String = d.extract().map_err(|_| wrong())?;
            let bytes: Option<Vec<u8>> =
                text.chars().map(|c| u8::try_from(c as u32).ok()).collect();
            let bytes = bytes.ok_or_else(wrong)?;
            if matches!(node.kind, Kind::Fixed(n) if n != bytes.len()) {
                return Err(wrong());
            }
            Value::Bytes(bytes)
        }
        Kind::Enum { symbols, .. } => {
            let s: String = d.extract().map_err(|_| wrong())?;
            let i = symbols.iter().position(|x| *x == s).ok_or_else(wrong)?;
            Value::Enum(id, i as u32)
        }
        Kind::Array(item) => {
            let list = d.downcast::<PyList>().map_err(|_| wrong())?;
            let items: Result<Vec<_>, _> = list
                .iter()
                .map(|x| from_default(schema, *item, &x))
                .collect();
            Value::Array(items?)
        }
        Kind::Map(item) => {
            let dict = d.downcast::<PyDict>().map_err(|_| wrong())?;
            let mut out = Vec::with_capacity(dict.len());
            for (k, x) in dict.iter() {
                out.push((
                    k.extract::<String>().map_err(|_| wrong())?,
                    from_default(schema, *item, &x)?,
                ));
            }
            Value::Map(out)
        }
        Kind::Record(fields) => {
            let dict = d.downcast::<PyDict>().map_err(|_| wrong())?;
            let mut out = Vec::with_capacity(fields.len());
            for f in fields {
                let given = dict.get_item(&f.name).ok().flatten();
                let x = match (given, &f.default) {
                    (Some(x), _) => x,
                    (None, Some(fd)) => fd.bind(d.py()).clone(),
                    (None, None) => return Err(format!("field {} is missing", f.name)),
                };
                out.push(from_default(schema, f.ty, &x)?);
            }
            Value::Record(id, out)
        }
        Kind::Union(branches) if !branches.is_empty() => from_default(schema, branches[0], d)?,
        _ => return Err(wrong()),
    })
}

pub fn kind_label(kind: &Kind) -> &'static str {
    match kind {
        Kind::Enum { .. } => "enum symbol",
        other => other.name(),
    }
}
