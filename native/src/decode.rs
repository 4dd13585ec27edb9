//! The decode loop: a resolution program run over one record's bytes.
//!
//! This is the trust boundary. Every length a record declares is checked
//! against the bytes that are left (and an item count against ``max_items``)
//! before anything is allocated for it; a varint longer than 10 bytes, a
//! negative length and a nesting deeper than [`MAX_DEPTH`] are refused; and no
//! path panics on bad input (the caller still catches one, to be sure).

use crate::resolve::{Op, OpId, Program, Range, Step};
use crate::schema::{Id, Kind, Schema};
use crate::value::Value;

/// Values nested deeper than this (a recursive schema, or arrays of arrays) are refused:
/// each level takes as little as one byte, and the stack is not unbounded.
pub const MAX_DEPTH: usize = 256;

#[derive(Debug)]
pub enum Error {
    /// the bytes end in the middle of a value
    Truncated,
    /// the bytes are not a value of the schema (the reason, one line)
    Invalid(String),
    /// past a decode limit (the whole message)
    Limit(String),
}

type R<T> = Result<T, Error>;

pub struct Cursor<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    #[inline]
    pub fn long(&mut self) -> R<i64> {
        // most numbers (block counts, small ints) are one byte
        if let Some(&byte) = self.data.get(self.pos) {
            if byte < 0x80 {
                self.pos += 1;
                let value = byte as u64;
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&byte) = self.data.get(self.pos) else {
                return Err(Error::Truncated);
            };
            self.pos += 1;
            value |= ((byte & 0x7f) as u64) << (7 * i);
            if byte < 0x80 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(Error::Invalid("a number longer than 10 bytes".into()))
    }

    pub fn int(&mut self) -> R<i32> {
        let v = self.long()?;
        i32::try_from(v).map_err(|_| Error::Invalid(format!("int {v} out of range")))
    }

    pub fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Truncated);
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// A length-prefixed run of bytes, its length checked before it is used.
    fn sized(&mut self) -> R<&'a [u8]> {
        let n = self.long()?;
        if n < 0 {
            return Err(Error::Invalid(format!("a negative length ({n})")));
        }
        if n as u64 > self.remaining() as u64 {
            return Err(Error::Truncated);
        }
        self.take(n as usize)
    }

    fn string(&mut self) -> R<String> {
        let raw = self.sized()?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(Error::Invalid("a string that is not valid UTF-8".into())),
        }
    }
}

pub struct Decoder<'p> {
    pub program: &'p Program,
    /// the writer schema, for the fields the reader skips
    pub writer: &'p Schema,
    pub max_items: u64,
}

pub fn items_error(what: &str, max: u64) -> Error {
    Error::Limit(format!(
        "an {what} declares more than {} items (decode_limits.max_items)", // bounds.py's words
        thousands(max)
    ))
}

pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Decoder<'_> {
    /// The count of the next block of an array or map (0 at the end), checked
    /// against ``max_items`` with the items already read.
    #[inline]
    pub fn block(&self, cur: &mut Cursor<'_>, total: &mut u64, what: &str) -> R<usize> {
        let count = cur.long()?;
        if count == 0 {
            return Ok(0);
        }
        let count = if count < 0 {
            cur.long()?; // the block's size in bytes, which we do not need
            count.unsigned_abs()
        } else {
            count as u64
        };
        *total = total.saturating_add(count);
        if *total > self.max_items {
            return Err(items_error(what, self.max_items));
        }
        Ok(count as usize)
    }

    pub fn value(&self, op: OpId, cur: &mut Cursor<'_>, depth: usize) -> R<Value> {
        if depth > MAX_DEPTH {
            return Err(Error::Invalid("the value nests too deeply".into()));
        }
        Ok(match &self.program.ops[op] {
            Op::Null => Value::Null,
            Op::Bool => match cur.take(1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(Error::Invalid(format!("a boolean byte {b:#04x}"))),
            },
            Op::Int => Value::Int(cur.int()?),
            Op::Long => Value::Long(cur.long()?),
            Op::Float => Value::Float(f32::from_le_bytes(
                cur.take(4)?.try_into().unwrap_or([0; 4]),
            )),
            Op::Double => Value::Double(f64::from_le_bytes(
                cur.take(8)?.try_into().unwrap_or([0; 8]),
            )),
            Op::Bytes | Op::StrToBytes => Value::Bytes(cur.sized()?.to_vec()),
            Op::Str | Op::BytesToStr => Value::Str(cur.string()?),
            Op::IntToLong => Value::Long(cur.int()? as i64),
            Op::IntToFloat => Value::Float(cur.int()? as f32),
            Op::IntToDouble => Value::Double(cur.int()? as f64),
            Op::LongToFloat => Value::Float(cur.long()? as f32),
            Op::LongToDouble => Value::Double(cur.long()? as f64),
            Op::FloatToDouble => {
                Value::Double(f32::from_le_bytes(cur.take(4)?.try_into().unwrap_or([0; 4])) as f64)
            }
            Op::Fixed(n) => Value::Bytes(cur.take(*n)?.to_vec()),
            Op::Enum { reader, map } => {
                let i = cur.long()?;
                match usize::try_from(i).ok().and_then(|i| map.get(i)) {
                    Some(Some(r)) => Value::Enum(*reader, *r),
                    Some(None) => {
                        return Err(Error::Invalid(format!(
                            "enum symbol {i} is not in the reader's enum"
                        )))
                    }
                    None => return Err(Error::Invalid(format!("enum index {i} out of range"))),
                }
            }
            Op::Array(item) => {
                let mut out = Vec::new();
                let mut total = 0;
                loop {
                    let n = self.block(cur, &mut total, "array")?;
                    if n == 0 {
                        break Value::Array(out);
                    }
                    // items of zero bytes (nulls) are bounded by max_items, others by the bytes left
                    out.reserve(n.min(cur.remaining()));
                    for _ in 0..n {
                        out.push(self.value(*item, cur, depth + 1)?);
                    }
                }
            }
            Op::Map(item) => {
                let mut out = Vec::new();
                let mut total = 0;
                loop {
                    let n = self.block(cur, &mut total, "map")?;
                    if n == 0 {
                        break Value::Map(out);
                    }
                    out.reserve(n.min(cur.remaining()));
                    for _ in 0..n {
                        let key = cur.string()?;
                        out.push((key, self.value(*item, cur, depth + 1)?));
                    }
                }
            }
            Op::Record {
                reader,
                steps,
                defaults,
                width,
            } => {
                let mut fields = vec![Value::Null; *width];
                for step in steps {
                    match step {
                        Step::Read(pos, op) => fields[*pos] = self.value(*op, cur, depth + 1)?,
                        Step::Skip(node) => self.skip(*node, cur, depth + 1)?,
                    }
                }
                for (pos, v) in defaults {
                    fields[*pos] = v.clone();
                }
                Value::Record(*reader, fields)
            }
            Op::Union(branches) => {
                let i = cur.long()?;
                match usize::try_from(i).ok().and_then(|i| branches.get(i)) {
                    Some(Ok(op)) => self.value(*op, cur, depth + 1)?,
                    Some(Err(why)) => return Err(Error::Invalid(why.clone())),
                    None => return Err(Error::Invalid(format!("union branch {i} out of range"))),
                }
            }
            Op::Logical { conv, check, inner } => {
                let v = self.value(*inner, cur, depth + 1)?;
                in_range(*check, &v)?;
                Value::Logical(*conv, Box::new(v))
            }
            Op::Fail(why) => return Err(Error::Invalid(why.clone())),
        })
    }

    /// Step over a value the reader does not keep, by the writer's schema.
    pub fn skip(&self, node: Id, cur: &mut Cursor<'_>, depth: usize) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Error::Invalid("the value nests too deeply".into()));
        }
        match &self.writer.get(node).kind {
            Kind::Null => {}
            Kind::Boolean => {
                cur.take(1)?;
            }
            Kind::Int | Kind::Long | Kind::Enum { .. } => {
                cur.long()?;
            }
            Kind::Float => {
                cur.take(4)?;
            }
            Kind::Double => {
                cur.take(8)?;
            }
            Kind::Bytes | Kind::String => {
                cur.sized()?;
            }
            Kind::Fixed(n) => {
                cur.take(*n)?;
            }
            Kind::Array(item) | Kind::Map(item) => {
                let is_map = matches!(self.writer.get(node).kind, Kind::Map(_));
                let mut total = 0;
                loop {
                    let n = self.block(cur, &mut total, if is_map { "map" } else { "array" })?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        if is_map {
                            cur.sized()?;
                        }
                        self.skip(*item, cur, depth + 1)?;
                    }
                }
            }
            Kind::Record(fields) => {
                for f in fields {
                    self.skip(f.ty, cur, depth + 1)?;
                }
            }
            Kind::Union(branches) => {
                let i = cur.long()?;
                let b = usize::try_from(i).ok().and_then(|i| branches.get(i));
                let Some(b) = b else {
                    return Err(Error::Invalid(format!("union branch {i} out of range")));
                };
                self.skip(*b, cur, depth + 1)?;
            }
        }
        Ok(())
    }
}

/// A timestamp or date that Python's datetime cannot hold fails its record here,
/// as fastavro's conversion would, rather than in a column's ``to_records``.
fn in_range(check: Range, v: &Value) -> R<()> {
    // 0001-01-01 and 9999-12-31T23:59:59.999999, from the Unix epoch
    const MIN_S: i64 = -62_135_596_800;
    const MAX_S: i64 = 253_402_300_799;
    let (n, lo, hi) = match (check, v) {
        (Range::Millis, Value::Long(n)) => (*n, MIN_S * 1000, MAX_S * 1000 + 999),
        (Range::Micros, Value::Long(n)) => (*n, MIN_S * 1_000_000, MAX_S * 1_000_000 + 999_999),
        (Range::Days, Value::Int(n)) => (*n as i64, -719_162, 2_932_896),
        _ => return Ok(()),
    };
    if n < lo || n > hi {
        return Err(Error::Invalid(format!(
            "{n} is out of the range of a Python date or datetime"
        )));
    }
    Ok(())
}
