//! Which columns a reader schema decodes into (see builders.rs for filling them).
//!
//! The layout is the reader's record flattened: a field that is itself a record
//! (not nullable, not recursive) becomes its fields, named ``a.b``. A leaf is a
//! typed column where numpy has a natural type for it (numbers, nullable
//! numbers, timestamps and dates, same-shape numeric arrays) and an object
//! column of fastavro's Python values otherwise.

use crate::schema::{Id, Kind, Logical, Schema};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Num {
    Bool,
    I32,
    I64,
    F32,
    F64,
}

#[derive(Clone, Copy)]
pub enum ColKind {
    Num(Num),
    /// datetime64 with this unit ("ms", "us" or "D")
    Time(&'static str),
    /// a numeric array nested this many levels deep
    Nd(Num, usize),
    Obj,
}

pub struct ColSpec {
    pub path: String,
    pub kind: ColKind,
    pub nullable: bool,
}

/// Where a reader record's fields go: a column, or the fields of a flattened record.
pub enum Slot {
    Leaf(usize),
    Nested(Vec<Slot>),
}

/// One step of the flattened layout, in the order the fields are written (for ``encode``).
pub struct Entry {
    pub path: String,
    pub node: Id,
    pub record: bool,
}

pub struct Layout {
    pub cols: Vec<ColSpec>,
    pub slots: Vec<Slot>,
    pub entries: Vec<Entry>,
}

fn num(schema: &Schema, id: Id) -> Option<Num> {
    let node = schema.get(id);
    if node.logical.is_some() {
        return None;
    }
    Some(match node.kind {
        Kind::Boolean => Num::Bool,
        Kind::Int => Num::I32,
        Kind::Long => Num::I64,
        Kind::Float => Num::F32,
        Kind::Double => Num::F64,
        _ => return None,
    })
}

fn time(schema: &Schema, id: Id) -> Option<&'static str> {
    match schema.get(id).logical {
        Some(Logical::TimestampMillis) => Some("ms"),
        Some(Logical::TimestampMicros) => Some("us"),
        Some(Logical::Date) => Some("D"),
        _ => None,
    }
}

fn kind_of(schema: &Schema, id: Id) -> (ColKind, bool) {
    if let Some(inner) = schema.nullable(id) {
        if let Some(n) = num(schema, inner) {
            return (ColKind::Num(n), true);
        }
        if let Some(unit) = time(schema, inner) {
            return (ColKind::Time(unit), true);
        }
        return (ColKind::Obj, false);
    }
    if let Some(n) = num(schema, id) {
        return (ColKind::Num(n), false);
    }
    if let Some(unit) = time(schema, id) {
        return (ColKind::Time(unit), false);
    }
    let (mut at, mut depth) = (id, 0);
    while let Kind::Array(item) = schema.get(at).kind {
        if schema.get(at).logical.is_some() {
            break;
        }
        at = item;
        depth += 1;
    }
    match (depth, num(schema, at)) {
        (d, Some(n)) if d > 0 => (ColKind::Nd(n, d), false),
        _ => (ColKind::Obj, false),
    }
}

impl Layout {
    pub fn of(schema: &Schema) -> Layout {
        let mut layout = Layout {
            cols: Vec::new(),
            slots: Vec::new(),
            entries: Vec::new(),
        };
        let mut seen = vec![schema.root];
        layout.slots = layout.record(schema, schema.root, "", &mut seen);
        layout
    }

    fn record(&mut self, schema: &Schema, id: Id, prefix: &str, seen: &mut Vec<Id>) -> Vec<Slot> {
        let Kind::Record(fields) = &schema.get(id).kind else {
            return Vec::new();
        };
        let mut slots = Vec::with_capacity(fields.len());
        for f in fields {
            let path = if prefix.is_empty() {
                f.name.clone()
            } else {
                format!("{prefix}.{}", f.name)
            };
            let flat = matches!(schema.get(f.ty).kind, Kind::Record(_)) && !seen.contains(&f.ty);
            self.entries.push(Entry {
                path: path.clone(),
                node: f.ty,
                record: flat,
            });
            if flat {
                seen.push(f.ty);
                let inner = self.record(schema, f.ty, &path, seen);
                seen.pop();
                slots.push(Slot::Nested(inner));
            } else {
                let (kind, nullable) = kind_of(schema, f.ty);
                self.cols.push(ColSpec {
                    path,
                    kind,
                    nullable,
                });
                slots.push(Slot::Leaf(self.cols.len() - 1));
            }
        }
        slots
    }
}
