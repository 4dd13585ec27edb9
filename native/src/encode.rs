//! Columns -> Avro bodies, byte for byte what fastavro's ``schemaless_writer`` writes.
//!
//! The Python side hands over one unit per leaf (or per nested record given as
//! one column of dicts), in the order the fields are written: a typed numpy
//! array, optionally with a mask, or a list of Python values. A value that does
//! not fit its field fails its record alone, with a reason that names the field.
//! Logical values of object columns go through fastavro's own converters, so a
//! datetime or a Decimal is written exactly as fastavro writes it.

use crate::builders::one_line;
use crate::schema::{Id, Kind, Schema};
use crate::value::kind_label;
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

const MAX_DEPTH: usize = 256;

/// Each record's value (None where it failed), and why each failure failed.
pub type Encoded<'py> = (Bound<'py, PyList>, Vec<(usize, String)>);

pub struct Encoder<'a, 'py> {
    pub py: Python<'py>,
    pub schema: &'a Schema,
    pub writers: &'a Bound<'py, PyDict>,
    pub name: &'a str,
}

enum Src<'py> {
    I64(PyReadonlyArrayDyn<'py, i64>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    Bool(PyReadonlyArrayDyn<'py, bool>),
    Obj(Bound<'py, PyList>),
    Missing,
}

struct Unit<'py> {
    node: Id,
    path: String,
    src: Src<'py>,
    mask: Option<PyReadonlyArrayDyn<'py, bool>>,
}

#[derive(Clone, Copy)]
enum Scalar {
    I(i64),
    F(f64),
    B(bool),
}

pub fn long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

impl<'py> Encoder<'_, 'py> {
    pub fn encode(
        &self,
        units: &Bound<'py, PyList>,
        n: usize,
        header: &[u8],
    ) -> PyResult<Encoded<'py>> {
        let units: Vec<Unit<'py>> = units
            .iter()
            .map(|u| self.unit(&u))
            .collect::<PyResult<_>>()?;
        let values = PyList::empty(self.py);
        let mut errors = Vec::new();
        let mut out = Vec::with_capacity(256);
        for i in 0..n {
            out.clear();
            out.extend_from_slice(header);
            let mut failed = None;
            for unit in &units {
                if let Err(why) = self.write_unit(unit, i, &mut out) {
                    failed = Some(format!(
                        "value does not match {}: {}: {why}",
                        self.name, unit.path
                    ));
                    break;
                }
            }
            match failed {
                None => values.append(PyBytes::new(self.py, &out))?,
                Some(why) => {
                    values.append(self.py.None())?;
                    errors.push((i, why));
                }
            }
        }
        Ok((values, errors))
    }

    fn unit(&self, u: &Bound<'py, PyAny>) -> PyResult<Unit<'py>> {
        let (node, path, kind, data, mask): (
            Id,
            String,
            String,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
        ) = u.extract()?;
        let src = match kind.as_str() {
            "i64" => Src::I64(data.extract()?),
            "f64" => Src::F64(data.extract()?),
            "bool" => Src::Bool(data.extract()?),
            "obj" => Src::Obj(data.downcast_into::<PyList>()?),
            _ => Src::Missing,
        };
        let mask = if mask.is_none() {
            None
        } else {
            Some(mask.extract()?)
        };
        Ok(Unit {
            node,
            path,
            src,
            mask,
        })
    }

    fn write_unit(&self, unit: &Unit<'py>, i: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let masked = unit
            .mask
            .as_ref()
            .and_then(|m| m.as_slice().ok().map(|s| s[i]))
            .unwrap_or(false);
        match &unit.src {
            Src::Missing => Err("no such column".into()),
            Src::Obj(list) => {
                let item = list.get_item(i).map_err(|e| one_line(self.py, &e))?;
                self.write_py(unit.node, &item, out, 0)
            }
            Src::I64(a) => self.write_array(unit.node, a, i, masked, out, Scalar::I),
            Src::F64(a) => self.write_array(unit.node, a, i, masked, out, Scalar::F),
            Src::Bool(a) => self.write_array(unit.node, a, i, masked, out, Scalar::B),
        }
    }

    /// Record ``i`` of a typed array: a scalar, or the slab of an n-d array.
    fn write_array<T: numpy::Element + Copy>(
        &self,
        node: Id,
        a: &PyReadonlyArrayDyn<'py, T>,
        i: usize,
        masked: bool,
        out: &mut Vec<u8>,
        wrap: fn(T) -> Scalar,
    ) -> Result<(), String> {
        let shape = a.shape().to_vec();
        let data = a
            .as_slice()
            .map_err(|_| "the array is not contiguous".to_string())?;
        let stride: usize = shape[1..].iter().product();
        let slab = data
            .get(i * stride..(i + 1) * stride)
            .ok_or("the column is shorter than n")?;
        let node = match (self.schema.nullable(node), masked) {
            (Some(_), true) => {
                return self.write_null_branch(node, out);
            }
            (Some(inner), false) => {
                self.write_branch_of(node, inner, out);
                inner
            }
            (None, true) => return Err("None for a field that is not nullable".into()),
            (None, false) => node,
        };
        if shape.len() == 1 {
            return self.write_scalar(node, wrap(slab[0]), out);
        }
        self.write_nd(node, &shape[1..], slab, out, wrap)
    }

    fn write_nd<T: Copy>(
        &self,
        node: Id,
        dims: &[usize],
        slab: &[T],
        out: &mut Vec<u8>,
        wrap: fn(T) -> Scalar,
    ) -> Result<(), String> {
        let Kind::Array(item) = self.schema.get(node).kind else {
            return match dims {
                [] => self.write_scalar(node, wrap(slab[0]), out),
                _ => Err(format!("an array of {} dimensions too many", dims.len())),
            };
        };
        let Some((&count, rest)) = dims.split_first() else {
            return Err("expected an array, got a number".into());
        };
        if count > 0 {
            long(out, count as i64);
            let step: usize = rest.iter().product();
            for k in 0..count {
                self.write_nd(item, rest, &slab[k * step..(k + 1) * step], out, wrap)?;
            }
        }
        long(out, 0);
        Ok(())
    }

    fn write_scalar(&self, node: Id, v: Scalar, out: &mut Vec<u8>) -> Result<(), String> {
        let kind = &self.schema.get(node).kind;
        match (kind, v) {
            (Kind::Boolean, Scalar::B(b)) => out.push(b as u8),
            (Kind::Int, Scalar::I(x)) => {
                let x =
                    i32::try_from(x).map_err(|_| format!("{x} is out of the range of an int"))?;
                long(out, x as i64);
            }
            (Kind::Long, Scalar::I(x)) => long(out, x),
            (Kind::Float, Scalar::F(x)) => out.extend_from_slice(&(x as f32).to_le_bytes()),
            (Kind::Double, Scalar::F(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Kind::Float, Scalar::I(x)) => out.extend_from_slice(&(x as f32).to_le_bytes()),
            (Kind::Double, Scalar::I(x)) => out.extend_from_slice(&(x as f64).to_le_bytes()),
            (k, v) => {
                let got = match v {
                    Scalar::I(_) => "an integer",
                    Scalar::F(_) => "a float",
                    Scalar::B(_) => "a boolean",
                };
                return Err(format!("expected {}, got {got}", kind_label(k)));
            }
        }
        Ok(())
    }

    fn branch_index(&self, node: Id, target: Id) -> i64 {
        match &self.schema.get(node).kind {
            Kind::Union(b) => b.iter().position(|x| *x == target).unwrap_or(0) as i64,
            _ => 0,
        }
    }

    fn write_branch_of(&self, union: Id, branch: Id, out: &mut Vec<u8>) {
        long(out, self.branch_index(union, branch));
    }

    fn write_null_branch(&self, union: Id, out: &mut Vec<u8>) -> Result<(), String> {
        let Kind::Union(b) = &self.schema.get(union).kind else {
            return Err("not a union".into());
        };
        let i = b
            .iter()
            .position(|x| matches!(self.schema.get(*x).kind, Kind::Null))
            .unwrap_or(0);
        long(out, i as i64);
        Ok(())
    }

    /// One Python value as the schema node says (fastavro's writer, for valid values).
    fn write_py(
        &self,
        node: Id,
        obj: &Bound<'py, PyAny>,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("the value nests too deeply".into());
        }
        let n = self.schema.get(node);
        let converted;
        let obj = if !n.logical_key.is_empty() && !obj.is_none() {
            let func = self
                .writers
                .get_item(&n.logical_key)
                .ok()
                .flatten()
                .ok_or("no logical writer")?;
            converted = func
                .call1((obj, n.node.as_ref().map(|x| x.bind(self.py))))
                .map_err(|e| one_line(self.py, &e))?;
            &converted
        } else {
            obj
        };
        let wrong = || format!("expected {}, got {}", kind_label(&n.kind), type_name(obj));
        let is_bool = obj.is_instance_of::<PyBool>() || type_name(obj) == "bool_";
        match &n.kind {
            Kind::Null if obj.is_none() => {}
            Kind::Boolean if is_bool => out.push(obj.is_truthy().map_err(|_| wrong())? as u8),
            Kind::Int | Kind::Long if !is_bool && !obj.is_none() => {
                let x: i64 = obj.extract().map_err(|_| wrong())?;
                return self.write_scalar(node, Scalar::I(x), out);
            }
            Kind::Float | Kind::Double if !obj.is_none() && !obj.is_instance_of::<PyString>() => {
                let x: f64 = obj.extract().map_err(|_| wrong())?;
                return self.write_scalar(node, Scalar::F(x), out);
            }
            Kind::String => {
                let s = obj.downcast::<PyString>().map_err(|_| wrong())?;
                let s = s
                    .to_str()
                    .map_err(|_| "a string that cannot be UTF-8 encoded".to_string())?;
                long(out, s.len() as i64);
                out.extend_from_slice(s.as_bytes());
            }
            Kind::Bytes | Kind::Fixed(_) => {
                let b: Vec<u8> = if let Ok(b) = obj.downcast::<PyBytes>() {
                    b.as_bytes().to_vec()
                } else if let Ok(b) = obj.downcast::<PyByteArray>() {
                    b.to_vec()
                } else {
                    return Err(wrong());
                };
                match n.kind {
                    Kind::Fixed(size) if size != b.len() => {
                        return Err(format!("expected {size} bytes, got {}", b.len()))
                    }
                    Kind::Fixed(_) => {}
                    _ => long(out, b.len() as i64),
                }
                out.extend_from_slice(&b);
            }
            Kind::Enum { symbols, .. } => {
                let s: String = obj.extract().map_err(|_| wrong())?;
                let i = symbols
                    .iter()
                    .position(|x| *x == s)
                    .ok_or_else(|| format!("{s:?} is not one of the enum's symbols"))?;
                long(out, i as i64);
            }
            Kind::Array(item) => {
                let list = self.sequence(obj).ok_or_else(wrong)?;
                if !list.is_empty() {
                    long(out, list.len() as i64);
                    for (k, x) in list.iter().enumerate() {
                        self.write_py(*item, x, out, depth + 1)
                            .map_err(|e| format!("[{k}]: {e}"))?;
                    }
                }
                long(out, 0);
            }
            Kind::Map(item) => {
                let dict = obj.downcast::<PyDict>().map_err(|_| wrong())?;
                if !dict.is_empty() {
                    long(out, dict.len() as i64);
                    for (k, x) in dict.iter() {
                        let k = k
                            .downcast::<PyString>()
                            .map_err(|_| "a map key that is not a string".to_string())?;
                        let k = k
                            .to_str()
                            .map_err(|_| "a map key that cannot be UTF-8 encoded".to_string())?;
                        long(out, k.len() as i64);
                        out.extend_from_slice(k.as_bytes());
                        self.write_py(*item, &x, out, depth + 1)
                            .map_err(|e| format!("{{{k}}}: {e}"))?;
                    }
                }
                long(out, 0);
            }
            Kind::Record(fields) => {
                let dict = obj.downcast::<PyDict>().map_err(|_| wrong())?;
                for f in fields {
                    let given = dict.get_item(&f.name).ok().flatten();
                    let value = match (given, &f.default) {
                        (Some(v), _) => v,
                        (None, Some(d)) => d.bind(self.py).clone(),
                        (None, None) if self.schema.nullable(f.ty).is_some() => {
                            self.py.None().into_bound(self.py)
                        }
                        (None, None) => return Err(format!("{}: no value and no default", f.name)),
                    };
                    self.write_py(f.ty, &value, out, depth + 1)
                        .map_err(|e| format!("{}: {e}", f.name))?;
                }
            }
            Kind::Union(_) => match (self.schema.nullable(node), obj.is_none()) {
                (Some(_), true) => self.write_null_branch(node, out)?,
                (Some(inner), false) => {
                    self.write_branch_of(node, inner, out);
                    self.write_py(inner, obj, out, depth + 1)?;
                }
                (None, _) => return Err("a union other than [\"null\", T]".into()),
            },
            _ => return Err(wrong()),
        }
        Ok(())
    }

    /// A list, a tuple, or a numpy array (as its ``tolist()``) as a list of items.
    fn sequence(&self, obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
        if let Ok(list) = obj.downcast::<PyList>() {
            return Some(list.iter().collect());
        }
        if let Ok(t) = obj.downcast::<PyTuple>() {
            return Some(t.iter().collect());
        }
        if type_name(obj) == "ndarray" {
            let list = obj.call_method0("tolist").ok()?;
            return list.downcast::<PyList>().ok().map(|l| l.iter().collect());
        }
        None
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}
