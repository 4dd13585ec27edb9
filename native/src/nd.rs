//! Nested numeric arrays read straight into their column's flat buffer.
//!
//! An n-d column (``array<array<float>>`` and the like) is the common case of a
//! tensor field, and building a ``Value`` per number and a ``Vec`` per inner
//! array cost far more than reading the numbers. Here the decoder walks the
//! arrays and appends the numbers to the column as it goes, checking that every
//! array at one level has the same length (the record's shape). The bytes are
//! checked exactly as the general path checks them (block counts against
//! ``max_items``, lengths against the bytes left, the nesting depth), so a
//! record fails here with the same reason; a record whose arrays turn out
//! ragged is read again by the general path, which keeps it as a value.

use crate::builders::Data;
use crate::columns::Num;
use crate::decode::{items_error, Cursor, Decoder, Error, MAX_DEPTH};
use crate::resolve::{Op, OpId, Program};

type R<T> = Result<T, Error>;

/// How one innermost number is read and what it becomes (the program's promotion).
#[derive(Clone, Copy)]
pub enum Leaf {
    Bool,
    Int,
    Long,
    Float,
    Double,
    IntToLong,
    IntToFloat,
    IntToDouble,
    LongToFloat,
    LongToDouble,
    FloatToDouble,
}

/// The leaf of ``op`` when it is ``levels`` plain arrays of numbers of the column's type.
pub fn plan(program: &Program, mut op: OpId, levels: usize, num: Num) -> Option<Leaf> {
    for _ in 0..levels {
        let Op::Array(item) = program.ops.get(op)? else {
            return None;
        };
        op = *item;
    }
    Some(match (program.ops.get(op)?, num) {
        (Op::Bool, Num::Bool) => Leaf::Bool,
        (Op::Int, Num::I32) => Leaf::Int,
        (Op::Long, Num::I64) => Leaf::Long,
        (Op::IntToLong, Num::I64) => Leaf::IntToLong,
        (Op::Float, Num::F32) => Leaf::Float,
        (Op::IntToFloat, Num::F32) => Leaf::IntToFloat,
        (Op::LongToFloat, Num::F32) => Leaf::LongToFloat,
        (Op::Double, Num::F64) => Leaf::Double,
        (Op::IntToDouble, Num::F64) => Leaf::IntToDouble,
        (Op::LongToDouble, Num::F64) => Leaf::LongToDouble,
        (Op::FloatToDouble, Num::F64) => Leaf::FloatToDouble,
        _ => return None,
    })
}

/// ``n`` little-endian numbers of ``width`` bytes, all checked against the bytes left at once.
fn raw<'a>(cur: &mut Cursor<'a>, n: usize, width: usize) -> R<&'a [u8]> {
    cur.take(n.checked_mul(width).ok_or(Error::Truncated)?)
}

/// Fixed-width numbers: the block's bytes checked at once, then converted.
#[inline(always)]
fn fixed<T, const W: usize>(
    cur: &mut Cursor<'_>,
    n: usize,
    out: &mut Vec<T>,
    one: impl Fn([u8; W]) -> T,
) -> R<()> {
    let bytes = raw(cur, n, W)?;
    out.extend(
        bytes
            .chunks_exact(W)
            .map(|b| one(b.try_into().unwrap_or([0; W]))),
    );
    Ok(())
}

/// Variable-width numbers, one at a time (each takes a byte at least).
#[inline(always)]
fn varints<T>(
    cur: &mut Cursor<'_>,
    n: usize,
    out: &mut Vec<T>,
    one: impl Fn(&mut Cursor<'_>) -> R<T>,
) -> R<()> {
    out.reserve(n.min(cur.remaining()));
    for _ in 0..n {
        out.push(one(cur)?);
    }
    Ok(())
}

fn bools(cur: &mut Cursor<'_>, n: usize, out: &mut Vec<bool>) -> R<()> {
    out.reserve(n.min(cur.remaining()));
    for _ in 0..n {
        out.push(match cur.take(1)?[0] {
            0 => false,
            1 => true,
            b => return Err(Error::Invalid(format!("a boolean byte {b:#04x}"))),
        });
    }
    Ok(())
}

/// Where one record's array is being read: its levels and the length seen at each.
pub struct Walk {
    pub leaf: Leaf,
    pub levels: usize,
    /// per level, the length of its first array (None until one ends)
    pub shape: Vec<Option<usize>>,
}

impl Walk {
    /// Whether an array of ``len`` at ``level`` keeps the record rectangular.
    #[inline]
    fn fits(&mut self, level: usize, len: usize) -> bool {
        match self.shape.get_mut(level) {
            Some(seen @ None) => *seen = Some(len),
            Some(Some(seen)) if *seen == len => {}
            _ => return false,
        }
        true
    }
}

fn too_deep() -> Error {
    Error::Invalid("the value nests too deeply".into())
}

impl Decoder<'_> {
    /// Read the field's array (at ``depth`` in the record) onto ``out``: false as soon as
    /// two arrays of one level differ in length (the caller then drops what was appended
    /// and reads the record's array the general way).
    pub fn nd(
        &self,
        walk: &mut Walk,
        cur: &mut Cursor<'_>,
        depth: usize,
        out: &mut Data,
    ) -> R<bool> {
        let le4 = f32::from_le_bytes;
        let le8 = f64::from_le_bytes;
        // one instance of the walk per kind of number, so the innermost loop has no match
        match (walk.leaf, out) {
            (Leaf::Float, Data::F32(v)) => {
                self.level(0, walk, cur, depth, v, &|c, n, v| fixed(c, n, v, le4))
            }
            (Leaf::Double, Data::F64(v)) => {
                self.level(0, walk, cur, depth, v, &|c, n, v| fixed(c, n, v, le8))
            }
            (Leaf::FloatToDouble, Data::F64(v)) => {
                self.level(0, walk, cur, depth, v, &|c, n, v| {
                    fixed(c, n, v, |b| le4(b) as f64)
                })
            }
            (Leaf::Bool, Data::Bool(v)) => self.level(0, walk, cur, depth, v, &bools),
            (Leaf::Int, Data::I32(v)) => self.level(0, walk, cur, depth, v, &|c, n, v| {
                varints(c, n, v, |c| c.int())
            }),
            (Leaf::Long, Data::I64(v)) => self.level(0, walk, cur, depth, v, &|c, n, v| {
                varints(c, n, v, |c| c.long())
            }),
            (Leaf::IntToLong, Data::I64(v)) => self.level(0, walk, cur, depth, v, &|c, n, v| {
                varints(c, n, v, |c| Ok(c.int()? as i64))
            }),
            (Leaf::IntToFloat, Data::F32(v)) => self.level(0, walk, cur, depth, v, &|c, n, v| {
                varints(c, n, v, |c| Ok(c.int()? as f32))
            }),
            (Leaf::LongToFloat, Data::F32(v)) => self.level(0, walk, cur, depth, v, &|c, n, v| {
                varints(c, n, v, |c| Ok(c.long()? as f32))
            }),
            (Leaf::IntToDouble, Data::F64(v)) => self.level(0, walk, cur, depth, v, &|c, n, v| {
                varints(c, n, v, |c| Ok(c.int()? as f64))
            }),
            (Leaf::LongToDouble, Data::F64(v)) => self.level(0, walk, cur, depth, v, &|c, n, v| {
                varints(c, n, v, |c| Ok(c.long()? as f64))
            }),
            // plan() picks the leaf by the column's type: never met, and the general path reads it
            _ => Ok(false),
        }
    }

    /// The next block's count (0 at the end), as ``block`` reads it: a short positive one
    /// (a byte, as nearly all are) here, anything else there.
    #[inline(always)]
    fn count(&self, cur: &mut Cursor<'_>, total: &mut u64) -> R<usize> {
        if let Some(&byte) = cur.data.get(cur.pos) {
            if byte < 0x80 && byte & 1 == 0 {
                cur.pos += 1;
                let n = (byte >> 1) as u64;
                *total = total.saturating_add(n);
                if *total > self.max_items {
                    return Err(items_error("array", self.max_items));
                }
                return Ok(n as usize);
            }
        }
        self.block(cur, total, "array")
    }

    /// An array at ``level`` of the walk (plan() saw that it is ``walk.levels - level``
    /// arrays deep), ``depth`` in the record.
    fn level<T, F>(
        &self,
        level: usize,
        walk: &mut Walk,
        cur: &mut Cursor<'_>,
        depth: usize,
        out: &mut Vec<T>,
        read: &F,
    ) -> R<bool>
    where
        F: Fn(&mut Cursor<'_>, usize, &mut Vec<T>) -> R<()>,
    {
        if level + 1 == walk.levels {
            return self.numbers(walk, cur, depth, out, read);
        }
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let (mut len, mut total) = (0usize, 0);
        loop {
            let n = self.count(cur, &mut total)?;
            if n == 0 {
                break;
            }
            len += n;
            for _ in 0..n {
                let fits = if level + 2 == walk.levels {
                    self.numbers(walk, cur, depth + 1, out, read)?
                } else {
                    self.level(level + 1, walk, cur, depth + 1, out, read)?
                };
                if !fits {
                    return Ok(false);
                }
            }
        }
        Ok(walk.fits(level, len))
    }

    /// An innermost array: its numbers onto ``out``.
    #[inline(always)]
    fn numbers<T, F>(
        &self,
        walk: &mut Walk,
        cur: &mut Cursor<'_>,
        depth: usize,
        out: &mut Vec<T>,
        read: &F,
    ) -> R<bool>
    where
        F: Fn(&mut Cursor<'_>, usize, &mut Vec<T>) -> R<()>,
    {
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let (mut len, mut total) = (0usize, 0);
        loop {
            let n = self.count(cur, &mut total)?;
            if n == 0 {
                break;
            }
            if depth + 1 > MAX_DEPTH {
                return Err(too_deep()); // where the general path reads the first number
            }
            len += n;
            read(cur, n, out)?;
        }
        Ok(walk.fits(walk.levels - 1, len))
    }
}
