//! An Avro schema (as the Python side parsed it from JSON) compiled into a flat arena.
//!
//! Nodes refer to each other by index, so a recursive record is just a cycle of
//! indices and nothing here needs reference counting. A logical type is kept only
//! when fastavro would convert it (its reader table has the key), because the
//! decoded values must be exactly fastavro's.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use std::collections::HashMap;

pub type Id = usize;

/// How deep a schema may nest; a registry schema past this is refused, not recursed into.
const MAX_SCHEMA_DEPTH: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logical {
    TimestampMillis,
    TimestampMicros,
    Date,
    /// Converted by fastavro's own function (decimal, uuid, time, local timestamps).
    Other,
}

pub enum Kind {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum {
        symbols: Vec<String>,
        default: Option<String>,
    },
    Array(Id),
    Map(Id),
    Record(Vec<Field>),
    Union(Vec<Id>),
}

impl Kind {
    /// The Avro type's name, as the errors say it.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Boolean => "boolean",
            Kind::Int => "int",
            Kind::Long => "long",
            Kind::Float => "float",
            Kind::Double => "double",
            Kind::Bytes => "bytes",
            Kind::String => "string",
            Kind::Fixed(_) => "fixed",
            Kind::Enum { .. } => "enum",
            Kind::Array(_) => "array",
            Kind::Map(_) => "map",
            Kind::Record(_) => "record",
            Kind::Union(_) => "union",
        }
    }
}

pub struct Field {
    pub name: String,
    pub ty: Id,
    pub aliases: Vec<String>,
    pub default: Option<PyObject>,
}

pub struct Node {
    pub kind: Kind,
    /// Full name of a named type, for resolution (and messages).
    pub name: String,
    pub aliases: Vec<String>,
    pub logical: Option<Logical>,
    /// The fastavro key (``"long-timestamp-millis"``) and the schema node, for its converters.
    pub logical_key: String,
    pub node: Option<PyObject>,
}

pub struct Schema {
    pub nodes: Vec<Node>,
    pub root: Id,
}

impl Schema {
    /// Compile a self-contained schema; ``logical_keys`` are the logical types fastavro converts.
    pub fn compile(raw: &Bound<'_, PyAny>, logical_keys: &[String]) -> Result<Schema, String> {
        let mut builder = Builder {
            nodes: Vec::new(),
            named: HashMap::new(),
            keys: logical_keys,
        };
        let root = builder.node(raw, "", 0)?;
        Ok(Schema {
            nodes: builder.nodes,
            root,
        })
    }

    pub fn get(&self, id: Id) -> &Node {
        &self.nodes[id]
    }

    /// The non-null branch of a ``["null", T]`` union (either order), if that is what it is.
    pub fn nullable(&self, id: Id) -> Option<Id> {
        if let Kind::Union(branches) = &self.nodes[id].kind {
            if branches.len() == 2 {
                let nulls: Vec<bool> = branches
                    .iter()
                    .map(|b| matches!(self.nodes[*b].kind, Kind::Null))
                    .collect();
                if nulls[0] && !nulls[1] {
                    return Some(branches[1]);
                }
                if nulls[1] && !nulls[0] {
                    return Some(branches[0]);
                }
            }
        }
        None
    }

    /// Whether every union in the schema is one with null (what the native encoder covers).
    pub fn first_general_union(&self) -> Option<String> {
        self.nodes
            .iter()
            .enumerate()
            .find_map(|(id, node)| match &node.kind {
                Kind::Union(b) if self.nullable(id).is_none() && b.len() != 1 => Some(format!(
                    "a union of {} branches other than [\"null\", T]",
                    b.len()
                )),
                _ => None,
            })
    }
}

struct Builder<'k> {
    nodes: Vec<Node>,
    named: HashMap<String, Id>,
    keys: &'k [String],
}

fn plain(kind: Kind) -> Node {
    Node {
        kind,
        name: String::new(),
        aliases: vec![],
        logical: None,
        logical_key: String::new(),
        node: None,
    }
}

fn primitive(name: &str) -> Option<Kind> {
    Some(match name {
        "null" => Kind::Null,
        "boolean" => Kind::Boolean,
        "int" => Kind::Int,
        "long" => Kind::Long,
        "float" => Kind::Float,
        "double" => Kind::Double,
        "bytes" => Kind::Bytes,
        "string" => Kind::String,
        _ => return None,
    })
}

fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}.{name}")
    }
}

fn strings(obj: Option<Bound<'_, PyAny>>) -> Vec<String> {
    obj.and_then(|o| o.extract::<Vec<String>>().ok())
        .unwrap_or_default()
}

impl Builder<'_> {
    fn push(&mut self, node: Node) -> Id {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn node(&mut self, raw: &Bound<'_, PyAny>, ns: &str, depth: usize) -> Result<Id, String> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err("the schema nests too deeply".into());
        }
        if let Ok(name) = raw.downcast::<PyString>() {
            let name = name.to_str().map_err(|e| e.to_string())?;
            if let Some(kind) = primitive(name) {
                return Ok(self.push(plain(kind)));
            }
            let full = full_name(name, ns);
            return self
                .named
                .get(&full)
                .or_else(|| self.named.get(name))
                .copied()
                .ok_or_else(|| format!("unknown type {full:?}"));
        }
        if let Ok(list) = raw.downcast::<PyList>() {
            let mut branches = Vec::with_capacity(list.len());
            for item in list.iter() {
                branches.push(self.node(&item, ns, depth + 1)?);
            }
            return Ok(self.push(plain(Kind::Union(branches))));
        }
        let dict = raw
            .downcast::<PyDict>()
            .map_err(|_| format!("not a schema: {raw}"))?;
        let ty = dict
            .get_item("type")
            .ok()
            .flatten()
            .ok_or("a schema object needs a 'type'")?;
        let Ok(kind) = ty.extract::<String>() else {
            return self.node(&ty, ns, depth + 1); // {"type": {...}} or {"type": [...]}
        };
        let get = |key: &str| dict.get_item(key).ok().flatten();
        let id = match kind.as_str() {
            "record" | "error" | "enum" | "fixed" => self.named_node(dict, &kind, ns, depth)?,
            "array" => {
                let items = get("items").ok_or("an array needs 'items'")?;
                let item = self.node(&items, ns, depth + 1)?;
                self.push(plain(Kind::Array(item)))
            }
            "map" => {
                let values = get("values").ok_or("a map needs 'values'")?;
                let value = self.node(&values, ns, depth + 1)?;
                self.push(plain(Kind::Map(value)))
            }
            other => match primitive(other) {
                Some(k) => self.push(plain(k)),
                None => self.node(&ty, ns, depth + 1)?, // a named type wrapped in an object
            },
        };
        if let Some(logical) = get("logicalType").and_then(|l| l.extract::<String>().ok()) {
            let base = match &self.nodes[id].kind {
                Kind::Int => "int",
                Kind::Long => "long",
                Kind::Bytes => "bytes",
                Kind::String => "string",
                Kind::Fixed(_) => "fixed",
                _ => "",
            };
            let key = format!("{base}-{logical}");
            if self.keys.contains(&key) {
                let node = &mut self.nodes[id];
                node.logical = Some(match key.as_str() {
                    "long-timestamp-millis" => Logical::TimestampMillis,
                    "long-timestamp-micros" => Logical::TimestampMicros,
                    "int-date" => Logical::Date,
                    _ => Logical::Other,
                });
                node.logical_key = key;
                node.node = Some(dict.clone().into_any().unbind());
            }
        }
        Ok(id)
    }

    fn named_node(
        &mut self,
        dict: &Bound<'_, PyDict>,
        kind: &str,
        ns: &str,
        depth: usize,
    ) -> Result<Id, String> {
        let get = |key: &str| dict.get_item(key).ok().flatten();
        let name: String = get("name")
            .and_then(|n| n.extract().ok())
            .ok_or("a named type needs a name")?;
        let own_ns: String = get("namespace")
            .and_then(|n| n.extract().ok())
            .unwrap_or_else(|| ns.to_string());
        let full = full_name(&name, &own_ns);
        let inner_ns = full
            .rsplit_once('.')
            .map(|(n, _)| n.to_string())
            .unwrap_or_default();
        let aliases = strings(get("aliases"));
        let id = self.push(Node {
            aliases,
            name: full.clone(),
            ..plain(Kind::Null)
        });
        self.named.insert(full.clone(), id); // before the fields: a record may contain itself
        let kind = match kind {
            "enum" => Kind::Enum {
                symbols: strings(get("symbols")),
                default: get("default").and_then(|d| d.extract().ok()),
            },
            "fixed" => Kind::Fixed(
                get("size")
                    .and_then(|s| s.extract::<usize>().ok())
                    .ok_or("a fixed needs a size")?,
            ),
            _ => {
                let fields = get("fields").ok_or("a record needs fields")?;
                let fields = fields
                    .downcast::<PyList>()
                    .map_err(|_| "a record's fields must be a list")?;
                let mut out = Vec::with_capacity(fields.len());
                for field in fields.iter() {
                    let field = field
                        .downcast::<PyDict>()
                        .map_err(|_| "a field must be an object")?;
                    let fget = |key: &str| field.get_item(key).ok().flatten();
                    let fname: String = fget("name")
                        .and_then(|n| n.extract().ok())
                        .ok_or("a field needs a name")?;
                    let fty = fget("type").ok_or("a field needs a type")?;
                    let ty = self.node(&fty, &inner_ns, depth + 1)?;
                    out.push(Field {
                        name: fname,
                        ty,
                        aliases: strings(fget("aliases")),
                        default: fget("default").map(|d| d.unbind()),
                    });
                }
                Kind::Record(out)
            }
        };
        self.nodes[id].kind = kind;
        Ok(id)
    }
}
