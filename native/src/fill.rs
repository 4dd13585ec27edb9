//! One record decoded into the batch's columns, all of it or none of it.
//!
//! The record's fields are walked as the reader's columns are laid out (a
//! flattened record field by field), so that an n-d column can be read straight
//! into its flat buffer (nd.rs) while every other field is decoded to a value.
//! Nothing is final until the whole record is: the values wait in the sink and
//! the numbers already appended are dropped again when the record fails, so a
//! failed record leaves no trace in any column.

use crate::builders::Builder;
use crate::columns::{ColKind, ColSpec, Slot};
use crate::decode::{Cursor, Decoder, Error, MAX_DEPTH};
use crate::nd::{self, Walk};
use crate::resolve::{Op, OpId, Step};
use crate::value::Value;

type R<T> = Result<T, Error>;

/// A column filled straight from the bytes by the record being decoded.
struct Direct {
    col: usize,
    /// the column's length before this record (what a failure truncates it back to)
    mark: usize,
    /// where this record's shape is in ``Sink::dims``
    dims_at: usize,
    levels: usize,
}

/// The columns, and what the record being decoded puts into them once it is whole.
pub struct Sink<'b> {
    builders: &'b mut [Builder],
    values: Vec<(usize, Value)>,
    direct: Vec<Direct>,
    dims: Vec<usize>,
    /// a walk's lengths per level, kept for the next record's walk
    spare: Vec<Option<usize>>,
}

impl<'b> Sink<'b> {
    pub fn new(builders: &'b mut [Builder]) -> Sink<'b> {
        Sink {
            builders,
            values: Vec::new(),
            direct: Vec::new(),
            dims: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// The record decoded: its values and shapes go into their columns.
    pub fn commit(&mut self) {
        for d in self.direct.drain(..) {
            let dims = self.dims.get(d.dims_at..d.dims_at + d.levels);
            if let (Some(b), Some(dims)) = (self.builders.get_mut(d.col), dims) {
                b.push_shape(dims);
            }
        }
        for (col, v) in self.values.drain(..) {
            if let Some(b) = self.builders.get_mut(col) {
                b.push(v);
            }
        }
        self.dims.clear();
    }

    /// The record failed: drop whatever of it the columns already hold.
    pub fn rollback(&mut self) {
        for d in self.direct.drain(..) {
            if let Some(b) = self.builders.get_mut(d.col) {
                b.truncate(d.mark);
            }
        }
        self.values.clear();
        self.dims.clear();
    }

    /// A value for a column, or a record's values for a flattened record's columns.
    fn put(&mut self, slot: &Slot, v: Value) {
        match slot {
            Slot::Leaf(c) => self.values.push((*c, v)),
            Slot::Nested(inner) => self.scatter(inner, v),
        }
    }

    fn scatter(&mut self, slots: &[Slot], record: Value) {
        let Value::Record(_, fields) = record else {
            return;
        };
        for (slot, v) in slots.iter().zip(fields) {
            self.put(slot, v);
        }
    }
}

impl Decoder<'_> {
    /// Decode the record at ``op`` into the columns of ``slots`` (its fields, as laid out).
    pub fn fill(
        &self,
        op: OpId,
        slots: &[Slot],
        cols: &[ColSpec],
        cur: &mut Cursor<'_>,
        depth: usize,
        sink: &mut Sink<'_>,
    ) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Error::Invalid("the value nests too deeply".into()));
        }
        let (steps, defaults) = match self.program.ops.get(op) {
            Some(Op::Record {
                steps,
                defaults,
                width,
                ..
            }) if *width == slots.len() => (steps, defaults),
            // a failing record, a union of records...: as a value
            _ => {
                let v = self.value(op, cur, depth)?;
                sink.scatter(slots, v);
                return Ok(());
            }
        };
        for step in steps {
            match step {
                Step::Read(pos, op) => self.field(&slots[*pos], *op, cols, cur, depth + 1, sink)?,
                Step::Skip(node) => self.skip(*node, cur, depth + 1)?,
            }
        }
        for (pos, v) in defaults {
            sink.put(&slots[*pos], v.clone());
        }
        Ok(())
    }

    fn field(
        &self,
        slot: &Slot,
        op: OpId,
        cols: &[ColSpec],
        cur: &mut Cursor<'_>,
        depth: usize,
        sink: &mut Sink<'_>,
    ) -> R<()> {
        let col = match slot {
            Slot::Nested(inner) => return self.fill(op, inner, cols, cur, depth, sink),
            Slot::Leaf(c) => *c,
        };
        if let Some(ColKind::Nd(num, levels)) = cols.get(col).map(|c| c.kind) {
            if let Some(leaf) = nd::plan(self.program, op, levels, num) {
                if self.nd_field(col, (leaf, levels), cur, depth, sink)? {
                    return Ok(());
                }
            }
        }
        let v = self.value(op, cur, depth)?;
        sink.values.push((col, v));
        Ok(())
    }

    /// An n-d field read straight into its column: false (and the cursor back where it
    /// was) when its arrays are ragged, for the general path to read it as a value.
    fn nd_field(
        &self,
        col: usize,
        (leaf, levels): (nd::Leaf, usize),
        cur: &mut Cursor<'_>,
        depth: usize,
        sink: &mut Sink<'_>,
    ) -> R<bool> {
        let Some(builder) = sink.builders.get_mut(col) else {
            return Ok(false);
        };
        let (start, mark) = (cur.pos, builder.filled());
        // registered first, so that an error (or a panic) here truncates the column back
        sink.direct.push(Direct {
            col,
            mark,
            dims_at: sink.dims.len(),
            levels,
        });
        let mut shape = std::mem::take(&mut sink.spare);
        shape.clear();
        shape.resize(levels, None);
        let mut walk = Walk {
            leaf,
            levels,
            shape,
        };
        let read = self.nd(&mut walk, cur, depth, builder.data());
        sink.spare = walk.shape;
        if read? {
            // a level no array reached (under an empty one) is 0 long
            let shape = sink.spare.iter().map(|s| s.unwrap_or(0));
            sink.dims.extend(shape);
            return Ok(true);
        }
        builder.truncate(mark);
        sink.direct.pop();
        cur.pos = start;
        Ok(false)
    }
}
