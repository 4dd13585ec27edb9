//! Writer -> reader resolution, compiled once per writer schema into a program.
//!
//! The decoder runs the program, never the schemas: which writer fields are
//! skipped, which reader fields take their default, how a number is promoted
//! and how an enum symbol is renumbered are all settled here. A difference the
//! reader cannot read becomes a ``Fail`` op, so only the records that actually
//! carry it fail (as with fastavro); a difference whose values fastavro would
//! shape differently from our columns is ``Unsupported``, and the batch is
//! decoded by fastavro instead.

use crate::schema::{Id, Kind, Schema};
use crate::value::{self, Value};
use pyo3::prelude::*;
use std::collections::HashMap;

pub type OpId = usize;

pub enum Op {
    Null,
    Bool,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    Str,
    IntToLong,
    IntToFloat,
    IntToDouble,
    LongToFloat,
    LongToDouble,
    FloatToDouble,
    BytesToStr,
    StrToBytes,
    Fixed(usize),
    /// writer symbol index -> reader symbol index (the reader's default already applied)
    Enum {
        reader: Id,
        map: Vec<Option<u32>>,
    },
    Array(OpId),
    Map(OpId),
    Record {
        reader: Id,
        steps: Vec<Step>,
        defaults: Vec<(usize, Value)>,
        width: usize,
    },
    /// a writer union: one program per branch, or why that branch cannot be read
    Union(Vec<Result<OpId, String>>),
    /// a value fastavro converts (timestamps, decimals...): the index of its converter
    Logical {
        conv: u32,
        check: Range,
        inner: OpId,
    },
    Fail(String),
}

/// The values a logical type can hold and still become a Python date or datetime.
#[derive(Clone, Copy)]
pub enum Range {
    None,
    Millis,
    Micros,
    Days,
}

pub enum Step {
    Read(usize, OpId),
    Skip(Id),
}

pub struct Program {
    pub ops: Vec<Op>,
    pub root: OpId,
}

/// Why a writer cannot be decoded natively (the batch goes to fastavro).
pub struct Unsupported(pub String);

/// The converters met so far: (fastavro key, the schema node); shared by all writers.
pub type Convs = Vec<(String, PyObject)>;

pub fn compile(
    py: Python<'_>,
    writer: &Schema,
    reader: &Schema,
    convs: &mut Convs,
) -> Result<Program, Unsupported> {
    let mut c = Compiler {
        py,
        w: writer,
        r: reader,
        ops: Vec::new(),
        memo: HashMap::new(),
        convs,
    };
    let root = c.resolve(writer.root, reader.root)?;
    Ok(Program { ops: c.ops, root })
}

struct Compiler<'a> {
    py: Python<'a>,
    w: &'a Schema,
    r: &'a Schema,
    ops: Vec<Op>,
    memo: HashMap<(Id, Id), OpId>,
    convs: &'a mut Convs,
}

fn short(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

impl Compiler<'_> {
    fn push(&mut self, op: Op) -> OpId {
        self.ops.push(op);
        self.ops.len() - 1
    }

    /// Whether a reader branch can read a writer type (fastavro's ``match_types``).
    fn matches(&self, w: Id, r: Id) -> bool {
        let (wk, rk) = (&self.w.get(w).kind, &self.r.get(r).kind);
        match (wk, rk) {
            (Kind::Union(_), _) | (_, Kind::Union(_)) => true,
            (Kind::Array(wi), Kind::Array(ri)) | (Kind::Map(wi), Kind::Map(ri)) => {
                self.matches(*wi, *ri)
            }
            (Kind::Fixed(a), Kind::Fixed(b)) if a != b => false,
            (Kind::Record(_), Kind::Record(_))
            | (Kind::Enum { .. }, Kind::Enum { .. })
            | (Kind::Fixed(_), Kind::Fixed(_)) => self.names_match(w, r),
            _ => promotion(wk, rk).is_some(),
        }
    }

    fn same_kind(&self, w: Id, r: Id) -> bool {
        let (wk, rk) = (&self.w.get(w).kind, &self.r.get(r).kind);
        std::mem::discriminant(wk) == std::mem::discriminant(rk) && self.matches(w, r)
    }

    fn names_match(&self, w: Id, r: Id) -> bool {
        let (wn, rn) = (self.w.get(w), self.r.get(r));
        short(&wn.name) == short(&rn.name)
            || rn
                .aliases
                .iter()
                .any(|a| a == &wn.name || a == short(&wn.name))
    }

    fn resolve(&mut self, w: Id, r: Id) -> Result<OpId, Unsupported> {
        if let Some(op) = self.memo.get(&(w, r)) {
            return Ok(*op);
        }
        let (wn, rn) = (self.w.get(w), self.r.get(r));
        if let Kind::Union(branches) = &wn.kind {
            let branches = branches.clone();
            let mut ops = Vec::with_capacity(branches.len());
            for b in branches {
                ops.push(self.branch(b, r)?);
            }
            return Ok(self.push(Op::Union(ops)));
        }
        if let Kind::Union(branches) = &rn.kind {
            // the branch of the same type first, then one it promotes to (as the spec says;
            // fastavro takes the first that matches either way, which for our own writer
            // could read a string branch as bytes)
            let same = branches.iter().copied().find(|b| self.same_kind(w, *b));
            let found = same.or_else(|| branches.iter().copied().find(|b| self.matches(w, *b)));
            return match found {
                Some(b) => self.resolve(w, b),
                None => Ok(self.push(Op::Fail(format!(
                    "the reader's union has no branch for the writer's {}",
                    wn.kind.name()
                )))),
            };
        }
        if wn.logical_key != rn.logical_key {
            return Err(Unsupported(format!(
                "the writer's {} and the reader's {} differ in logical type",
                display(&wn.logical_key, &wn.kind),
                display(&rn.logical_key, &rn.kind)
            )));
        }
        let inner = self.resolve_plain(w, r)?;
        if rn.logical.is_none() {
            return Ok(inner);
        }
        let check = match rn.logical_key.as_str() {
            "long-timestamp-millis" | "long-local-timestamp-millis" => Range::Millis,
            "long-timestamp-micros" | "long-local-timestamp-micros" => Range::Micros,
            "int-date" => Range::Days,
            _ => Range::None,
        };
        let node = rn.node.as_ref().map(|n| n.clone_ref(self.py));
        self.convs.push((
            rn.logical_key.clone(),
            node.unwrap_or_else(|| self.py.None()),
        ));
        let conv = (self.convs.len() - 1) as u32;
        Ok(self.push(Op::Logical { conv, check, inner }))
    }

    fn branch(&mut self, w: Id, r: Id) -> Result<Result<OpId, String>, Unsupported> {
        let readable = match &self.r.get(r).kind {
            Kind::Union(rb) => rb.iter().any(|b| self.matches(w, *b)),
            _ => self.matches(w, r),
        };
        if !readable {
            return Ok(Err(format!(
                "the writer's {} branch is not in the reader's schema",
                self.w.get(w).kind.name()
            )));
        }
        self.resolve(w, r).map(Ok)
    }

    fn resolve_plain(&mut self, w: Id, r: Id) -> Result<OpId, Unsupported> {
        let (wk, rk) = (&self.w.get(w).kind, &self.r.get(r).kind);
        if let Some(op) = promotion(wk, rk) {
            return Ok(self.push(op));
        }
        let fail = |what: String| Ok(Op::Fail(what));
        let op = match (wk, rk) {
            (Kind::Fixed(a), Kind::Fixed(b)) if a == b && self.names_match(w, r) => {
                Ok(Op::Fixed(*a))
            }
            (
                Kind::Enum { symbols: ws, .. },
                Kind::Enum {
                    symbols: rs,
                    default,
                },
            ) if self.names_match(w, r) => {
                let find = |s: &String| rs.iter().position(|x| x == s).map(|i| i as u32);
                let fallback = default.as_ref().and_then(find);
                if default.is_some() && fallback.is_none() {
                    return Err(Unsupported(
                        "an enum default that is not one of its symbols".into(),
                    ));
                }
                Ok(Op::Enum {
                    reader: r,
                    map: ws.iter().map(|s| find(s).or(fallback)).collect(),
                })
            }
            (Kind::Array(wi), Kind::Array(ri)) => {
                let (wi, ri) = (*wi, *ri);
                let at = self.push(Op::Null); // placeholder: the items may refer back here
                self.memo.insert((w, r), at);
                let item = self.resolve(wi, ri)?;
                self.ops[at] = Op::Array(item);
                return Ok(at);
            }
            (Kind::Map(wv), Kind::Map(rv)) => {
                let (wv, rv) = (*wv, *rv);
                let at = self.push(Op::Null);
                self.memo.insert((w, r), at);
                let item = self.resolve(wv, rv)?;
                self.ops[at] = Op::Map(item);
                return Ok(at);
            }
            (Kind::Record(_), Kind::Record(_)) if self.names_match(w, r) => {
                return self.record(w, r)
            }
            _ => fail(format!(
                "the reader expects {}, the writer writes {}",
                rk.name(),
                wk.name()
            )),
        }?;
        Ok(self.push(op))
    }

    fn record(&mut self, w: Id, r: Id) -> Result<OpId, Unsupported> {
        let at = self.push(Op::Null);
        self.memo.insert((w, r), at);
        let (Kind::Record(wf), Kind::Record(rf)) = (&self.w.get(w).kind, &self.r.get(r).kind)
        else {
            unreachable!("record() is called with two records")
        };
        let mut written = vec![false; rf.len()];
        let mut plan: Vec<(Option<usize>, Id, Id)> = Vec::new();
        for field in wf {
            let pos = rf
                .iter()
                .position(|f| f.name == field.name)
                .or_else(|| rf.iter().position(|f| f.aliases.contains(&field.name)));
            match pos {
                Some(p) if !written[p] => {
                    written[p] = true;
                    plan.push((Some(p), field.ty, rf[p].ty));
                }
                _ => plan.push((None, field.ty, 0)),
            }
        }
        let mut defaults = Vec::new();
        let mut missing = None;
        for (p, field) in rf.iter().enumerate() {
            if written[p] {
                continue;
            }
            match &field.default {
                Some(d) => {
                    let v =
                        value::from_default(self.r, field.ty, d.bind(self.py)).map_err(|why| {
                            Unsupported(format!("the default of field {:?} ({why})", field.name))
                        })?;
                    defaults.push((p, v));
                }
                None => {
                    missing = Some(format!(
                        "No default value for field {} in {}",
                        field.name,
                        self.r.get(r).name
                    ))
                }
            }
        }
        let width = rf.len();
        if let Some(why) = missing {
            self.ops[at] = Op::Fail(why);
            return Ok(at);
        }
        let mut steps = Vec::with_capacity(plan.len());
        for (pos, wt, rt) in plan {
            steps.push(match pos {
                Some(p) => Step::Read(p, self.resolve(wt, rt)?),
                None => Step::Skip(wt),
            });
        }
        self.ops[at] = Op::Record {
            reader: r,
            steps,
            defaults,
            width,
        };
        Ok(at)
    }
}

fn display(key: &str, kind: &Kind) -> String {
    if key.is_empty() {
        kind.name().to_string()
    } else {
        key.to_string()
    }
}

/// The op reading a writer primitive as a reader primitive (same type or promoted).
fn promotion(w: &Kind, r: &Kind) -> Option<Op> {
    Some(match (w, r) {
        (Kind::Null, Kind::Null) => Op::Null,
        (Kind::Boolean, Kind::Boolean) => Op::Bool,
        (Kind::Int, Kind::Int) => Op::Int,
        (Kind::Long, Kind::Long) => Op::Long,
        (Kind::Float, Kind::Float) => Op::Float,
        (Kind::Double, Kind::Double) => Op::Double,
        (Kind::Bytes, Kind::Bytes) => Op::Bytes,
        (Kind::String, Kind::String) => Op::Str,
        (Kind::Int, Kind::Long) => Op::IntToLong,
        (Kind::Int, Kind::Float) => Op::IntToFloat,
        (Kind::Int, Kind::Double) => Op::IntToDouble,
        (Kind::Long, Kind::Float) => Op::LongToFloat,
        (Kind::Long, Kind::Double) => Op::LongToDouble,
        (Kind::Float, Kind::Double) => Op::FloatToDouble,
        (Kind::Bytes, Kind::String) => Op::BytesToStr,
        (Kind::String, Kind::Bytes) => Op::StrToBytes,
        _ => return None,
    })
}
