"""One declaration per field of a spec, and what is generated from it.

A *spec* here is a frozen dataclass that an application is described with
(the blueprint model's :class:`~streamflow.blueprint.model.StreamletSpec`, a
topic, Kafka, autoscaling, :class:`~streamflow.schema.bounds.DecodeLimits`).
Each of its fields is declared once, where the dataclass names it::

    replicas: int = field(default=1, metadata=declared("Pods to run.", minimum=0))

The declaration holds what the type and the default do not say: the doc,
the OpenAPI bounds, the key a blueprint writes when it differs, whether the
plain form leaves the field out at its default. Everything else is read from
the dataclass itself (its type hints and defaults). From that one table come:

* the names a blueprint may write and must write (:func:`blueprint_keys`,
  :func:`required_keys`), which the verifier's structure pass checks;
* the plain form and back (:func:`to_plain`, :func:`from_plain`), under the
  blueprint's snake_case names or, with ``naming=camel_case``, the Kubernetes
  spec's: only the fields are renamed, never the keys of data (a ``config``
  map, a streamlet's or topic's name);
* the OpenAPI schema of the custom resource (:func:`openapi`);
* where a field sits in the spec (:func:`spec_path`).

Every field of a spec class is declared: a section's ``name``, which is its key
in the enclosing mapping, with :data:`NAME_IN_MAPPING`; only a field whose name
starts with ``_`` (a cache) may go without. A field added without a declaration
is a TypeError the first time the class's table is read, so no field reaches
one of the generated forms and misses another.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = [
    "NAME_IN_MAPPING",
    "Field",
    "Shape",
    "blueprint_keys",
    "camel_case",
    "declared",
    "from_plain",
    "openapi",
    "required_keys",
    "snake_case",
    "spec_path",
    "table",
    "to_plain",
]

_KEY = "streamflow.field"
_T = TypeVar("_T")
Naming = Callable[[str], str]


def camel_case(name: str) -> str:
    """A field's name as a Kubernetes spec spells it: ``stall_after`` -> ``stallAfter``."""
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def snake_case(name: str) -> str:
    """A spec's field name as the blueprint spells it: ``stallAfter`` -> ``stall_after``."""
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), name)


def _same(name: str) -> str:
    return name


@dataclasses.dataclass(frozen=True)
class _Declared:
    doc: str
    key: str | None
    blueprint: Any  # a name, None (never written), or _UNSET (the key)
    required: bool
    omit_default: bool
    parse: Callable[[str], Any] | None
    keyed_by: str | None
    schema: Mapping[str, Any]


_UNSET: Any = object()

# The metadata of a section's name field: not in its plain form, where it is the section's
# key in the enclosing mapping (``streamlets: {scorer: {...}}``)
NAME_IN_MAPPING: Mapping[str, Any] = {_KEY: None}


def declared(
    doc: str,
    *,
    key: str | None = None,
    blueprint: str | None = _UNSET,
    required: bool = False,
    omit_default: bool = False,
    parse: Callable[[str], Any] | None = None,
    keyed_by: str | None = None,
    openapi: Mapping[str, Any] | None = None,
    **bounds: Any,
) -> dict[str, Any]:
    """A field's declaration, as ``dataclasses.field(metadata=...)``.

    ``key``: its name in the plain form, when not the attribute's. ``blueprint``:
    the name a blueprint writes, when not the key; None when a blueprint never
    writes it. ``omit_default``: the plain form leaves it out at its default.
    ``parse``: its values (or a tuple's items) are written as text, read back
    with this and written with ``str``. ``keyed_by``: a mapping of sections
    whose keys are each section's field of that name. ``openapi`` and
    ``bounds`` (``minimum=0``): OpenAPI keywords over those its type gives.
    """
    return {
        _KEY: _Declared(
            doc=doc,
            key=key,
            blueprint=blueprint,
            required=required,
            omit_default=omit_default,
            parse=parse,
            keyed_by=keyed_by,
            schema={**(openapi or {}), **bounds},
        )
    }


@dataclasses.dataclass(frozen=True)
class Shape:
    """How a field's values are written, worked out once from its type.

    ``kind`` is one of: ``section`` (a declared spec class, ``of``), ``sections`` (a
    mapping of names to ``of``), ``enum`` (a string enum ``of``), ``text`` (written as
    text, read with ``parse``), ``list`` (a tuple of ``item``), ``data`` (a mapping
    whose keys are data; ``of`` is ``str`` when its values are text), or ``scalar``
    (``of`` is bool, int, float or str; anything else is passed as it is).
    """

    kind: str
    optional: bool = False
    of: Any = None
    item: Shape | None = None
    parse: Callable[[str], Any] | None = None


@dataclasses.dataclass(frozen=True)
class Field:
    """One row of a spec's table: the declaration, with the dataclass's type and default."""

    attr: str
    key: str
    blueprint: str | None
    doc: str
    hint: Any
    shape: Shape
    default: Any  # dataclasses.MISSING when the field has none
    required: bool
    omit_default: bool
    keyed_by: str | None
    schema: Mapping[str, Any]

    @property
    def has_default(self) -> bool:
        return self.default is not dataclasses.MISSING


_TABLES: dict[type, tuple[Field, ...]] = {}


def table(cls: type) -> tuple[Field, ...]:
    """The declared fields of a spec class, in the order the class declares them."""
    found = _TABLES.get(cls)
    if found is None:
        found = _TABLES[cls] = _read_table(cls)
    return found


def _read_table(cls: type) -> tuple[Field, ...]:
    hints = typing.get_type_hints(cls)
    rows = []
    for item in dataclasses.fields(cls):
        if item.name.startswith("_"):
            continue  # a cache, not a field of the spec
        if _KEY not in item.metadata:
            raise TypeError(
                f"{cls.__name__}.{item.name} is not declared: give it "
                "metadata=declared(...) (or NAME_IN_MAPPING), so the blueprint, the plain "
                "form and the schema all know it"
            )
        found = item.metadata[_KEY]
        if found is None:
            continue  # the section's name: its key in the enclosing mapping
        if item.default is not dataclasses.MISSING:
            default = item.default
        elif item.default_factory is not dataclasses.MISSING:
            default = item.default_factory()
        else:
            default = dataclasses.MISSING
        key = found.key or item.name
        rows.append(
            Field(
                attr=item.name,
                key=key,
                blueprint=key if found.blueprint is _UNSET else found.blueprint,
                doc=found.doc,
                hint=hints[item.name],
                shape=_shape(hints[item.name], found.parse),
                default=default,
                required=found.required,
                omit_default=found.omit_default,
                keyed_by=found.keyed_by,
                schema=found.schema,
            )
        )
    if not rows:
        raise TypeError(f"{cls.__name__} declares no fields")
    return tuple(rows)


def _shape(hint: Any, parse: Callable[[str], Any] | None) -> Shape:
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{hint}: a field is one type, or that type or None")
        hint, optional = args[0], True
    origin = typing.get_origin(hint)
    if _is_spec(hint):
        return Shape("section", optional, of=hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return Shape("enum", optional, of=hint)
    if origin is tuple:
        return Shape("list", optional, item=_shape(typing.get_args(hint)[0], parse))
    if parse is not None:
        return Shape("text", optional, parse=parse)
    if origin is not None and issubclass(origin, Mapping):
        inner = typing.get_args(hint)[1]
        if _is_spec(inner):
            return Shape("sections", optional, of=inner)
        return Shape("data", optional, of=inner)
    return Shape("scalar", optional, of=hint)


def _is_spec(hint: Any) -> bool:
    """A spec class: a dataclass with declared fields."""
    return (
        isinstance(hint, type)
        and dataclasses.is_dataclass(hint)
        and any(_KEY in item.metadata for item in dataclasses.fields(hint))
    )


def blueprint_keys(cls: type) -> tuple[str, ...]:
    """The field names a blueprint may write in a section of this class."""
    return tuple(f.blueprint for f in table(cls) if f.blueprint is not None)


def required_keys(cls: type) -> tuple[str, ...]:
    """The field names a blueprint must write in a section of this class."""
    return tuple(f.blueprint for f in table(cls) if f.required and f.blueprint is not None)


# -- the plain form ----------------------------------------------------------------------------


def _encode(shape: Shape, value: Any, naming: Naming) -> Any:
    if value is None:
        return None
    kind = shape.kind
    if kind == "section":
        return to_plain(value, naming=naming)
    if kind in ("enum", "text"):
        return str(value)
    if kind == "list":
        assert shape.item is not None
        return [_encode(shape.item, v, naming) for v in value]
    if kind == "sections":
        return {name: to_plain(section, naming=naming) for name, section in value.items()}
    if kind == "data":
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}
    return value


def to_plain(spec: Any, *, naming: Naming = _same) -> dict[str, Any]:
    """The plain (JSON) form of a spec, its fields named by ``naming``."""
    out: dict[str, Any] = {}
    for row in table(type(spec)):
        value = getattr(spec, row.attr)
        if row.omit_default and value == row.default:
            continue
        out[naming(row.key)] = _encode(row.shape, value, naming)
    return out


def _decode(shape: Shape, value: Any, row: Field, naming: Naming) -> Any:
    kind = shape.kind
    key = naming(row.key)
    if kind == "section":
        if not isinstance(value, Mapping):
            raise TypeError(f"{key} must be a mapping, got {type(value).__name__}")
        return from_plain(shape.of, value, naming=naming)
    if kind == "enum":
        return shape.of(value)
    if kind == "text":
        assert shape.parse is not None
        return shape.parse(str(value))
    if kind == "list":
        if isinstance(value, (str, Mapping)) or not isinstance(value, Iterable):
            raise TypeError(f"{key} must be a list, got {type(value).__name__}")
        assert shape.item is not None
        return tuple(_decode(shape.item, v, row, naming) for v in value)
    if kind in ("sections", "data") and not isinstance(value, Mapping):
        raise TypeError(f"{key} must be a mapping, got {type(value).__name__}")
    if kind == "sections":
        return {name: _section(shape.of, data, row, name, naming) for name, data in value.items()}
    if kind == "data":
        if shape.of is str:  # Kafka's config: every value as Kafka spells it
            return {str(k): _text(v) for k, v in value.items()}
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}
    if shape.of in (bool, int, float, str):
        return shape.of(value)
    return value


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _section(cls: type, data: Any, row: Field, name: str, naming: Naming) -> Any:
    """One section of a mapping of them; an error says which (``streamlets.scorer: ...``)."""
    where = f"{naming(row.key)}.{name}"
    if not isinstance(data, Mapping):
        raise TypeError(f"{where} must be a mapping, got {type(data).__name__}")
    try:
        return from_plain(cls, data, naming=naming, **{row.keyed_by or "name": name})
    except KeyError as exc:
        raise KeyError(f"{where}.{exc.args[0]}") from None
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise _located(exc, f"{where}: {exc}") from None


def _located(exc: Exception, message: str) -> Exception:
    """``exc``'s kind with ``message``; a ValueError where that kind wants more than a message."""
    try:
        return type(exc)(message)
    except Exception:  # UnicodeDecodeError, say, takes five arguments
        return ValueError(message)


def from_plain(
    cls: type[_T], data: Mapping[str, Any], *, naming: Naming = _same, **extra: Any
) -> _T:
    """A spec from its plain form (as :func:`to_plain` names it); ``extra`` sets undeclared fields.

    A missing field takes its default (KeyError when it has none), and so does a
    null one that may not be null. TypeError and ValueError say which field is wrong.
    """
    values: dict[str, Any] = dict(extra)
    for row in table(cls):
        name = naming(row.key)
        value = data.get(name)
        if value is None:
            if name in data and row.shape.optional:
                values[row.attr] = None
            elif not row.has_default:
                raise KeyError(name)
            continue  # missing, or null where null is not a value: the default
        values[row.attr] = _decode(row.shape, value, row, naming)
    return cls(**values)


# -- the OpenAPI schema ------------------------------------------------------------------------


def _schema_of(shape: Shape, naming: Naming) -> dict[str, Any]:
    out: dict[str, Any]
    kind = shape.kind
    if kind == "section":
        out = openapi(shape.of, naming=naming)
    elif kind == "enum":
        names = [str(member) for member in shape.of]
        # a nullable enum would have to list null among its values: a pattern says the same
        out = {"type": "string"}
        out.update({"pattern": f"^({'|'.join(names)})$"} if shape.optional else {"enum": names})
    elif kind == "text":
        out = {"type": "string"}
    elif kind == "list":
        assert shape.item is not None
        out = {"type": "array", "items": _schema_of(shape.item, naming)}
    elif kind == "sections":
        out = {"type": "object", "additionalProperties": openapi(shape.of, naming=naming)}
    elif kind == "data":
        out = {"type": "object"}
    else:
        out = {"type": {bool: "boolean", int: "integer", float: "number"}.get(shape.of, "string")}
    if shape.optional:
        out["nullable"] = True
    return out


def openapi(cls: type, *, naming: Naming = camel_case) -> dict[str, Any]:
    """The OpenAPI v3 (structural) schema of a spec class's plain form, named by ``naming``."""
    properties = {}
    for row in table(cls):
        schema = _schema_of(row.shape, naming)
        schema.update(copy.deepcopy(row.schema))  # the caller's to change, not the table's
        if row.doc:
            schema["description"] = row.doc
        properties[naming(row.key)] = schema
    out: dict[str, Any] = {"type": "object"}
    required = [naming(row.key) for row in table(cls) if row.required]
    if required:
        out["required"] = required
    out["properties"] = properties
    return out


def spec_path(cls: type, parents: tuple[str, ...], key: str, *, naming: Naming) -> str:
    """The name ``naming`` gives ``key`` under ``parents`` (plain keys from ``cls`` down).

    A declared field is renamed; a key of data (a ``config`` entry, a section's
    name in its mapping) is as written.
    """
    level: type | None = cls
    in_mapping = False  # the next parent is a section's name
    for parent in parents:
        if level is None:
            return key
        if in_mapping:
            in_mapping = False
            continue
        row = next((r for r in table(level) if r.key == parent), None)
        if row is None or row.shape.kind not in ("section", "sections"):
            return key
        level, in_mapping = row.shape.of, row.shape.kind == "sections"
    if level is None or in_mapping:
        return key
    return naming(key) if any(r.key == key for r in table(level)) else key
