"""Why a Python value is not a valid datum of an Avro schema, as a list of reasons.

fastavro can tell *whether* a value is valid, but it stops at the first bad
field and describes it in schema terms (``field t.R.s: None is not a valid
string``). A user who emitted a record, or posted a JSON body, wants every
problem at once, each at a path they recognise (``address.city``,
``items[2]``). The walk here is only taken on the error path (and by the
testkit), so it favours clear messages over speed.

It accepts what fastavro's writer accepts for each type, so a value it passes
can be encoded; ``strict`` additionally reports record fields the schema does
not have, which fastavro silently drops.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import uuid
from typing import Any

from streamflow.schema.store import Schema

__all__ = ["datum_problems", "named_types", "validation_problems"]

_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_MAX_SHOWN = 40


def validation_problems(schema: Schema, value: Any, *, strict: bool = False) -> list[str]:
    """Every reason ``value`` is not a record of ``schema``; empty when it is valid."""
    return datum_problems(schema.parsed, value, named=named_types(schema), strict=strict)


def datum_problems(
    node: Any, value: Any, *, named: dict[str, Any], strict: bool = False, path: str = ""
) -> list[str]:
    """Like :func:`validation_problems` for any (sub)schema; ``named`` resolves references."""
    walker = _Walker(named, strict)
    walker.check(node, value, path)
    return walker.problems


@functools.lru_cache(maxsize=256)
def named_types(schema: Schema) -> dict[str, Any]:
    """Each named type defined anywhere in ``schema``, by full name."""
    found: dict[str, Any] = {}
    _collect_named(schema.parsed, found)
    return found


def _collect_named(node: Any, found: dict[str, Any]) -> None:
    if isinstance(node, list):
        for branch in node:
            _collect_named(branch, found)
    elif isinstance(node, dict):
        if isinstance(node.get("name"), str) and node.get("type") in ("record", "enum", "fixed"):
            found[node["name"]] = node
        for field in node.get("fields", ()):
            _collect_named(field["type"], found)
        for key in ("items", "values"):
            if key in node:
                _collect_named(node[key], found)
        if isinstance(node.get("type"), dict | list):
            _collect_named(node["type"], found)


def _show(value: Any) -> str:
    text = repr(value)
    shown = text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
    return f"{type(value).__name__} {shown}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Walker:
    def __init__(self, named: dict[str, Any], strict: bool) -> None:
        self.named = named
        self.strict = strict
        self.problems: list[str] = []

    def resolve(self, node: Any) -> Any:
        if isinstance(node, str) and node in self.named:
            return self.named[node]
        return node

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path or 'value'}: {message}")

    def check(self, node: Any, value: Any, path: str) -> None:
        node = self.resolve(node)
        if isinstance(node, list):
            self.check_union(node, value, path)
            return
        kind = node.get("type") if isinstance(node, dict) else node
        if isinstance(kind, dict | list):  # a wrapped type: {"type": {...}}
            self.check(kind, value, path)
        elif kind == "record":
            self.check_record(node, value, path)
        elif kind == "array":
            self.check_array(node, value, path)
        elif kind == "map":
            self.check_map(node, value, path)
        else:
            reason = _leaf_problem(node, value)
            if reason:
                self.fail(path, reason)

    def check_record(self, node: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.fail(path, f"expected a {node['name']} record (a dict), got {_show(value)}")
            return
        for field in node["fields"]:
            name = field["name"]
            if name in value:
                self.check(field["type"], value[name], _join(path, name))
            elif "default" not in field:
                expected = _type_label(self.resolve(field["type"]))
                self.fail(_join(path, name), f"missing required field ({expected})")
        if self.strict:
            known = {f["name"] for f in node["fields"]}
            for extra in sorted(k for k in value if k not in known):
                self.fail(_join(path, str(extra)), f"{node['name']} has no field {extra!r}")

    def check_array(self, node: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, list | tuple):
            self.fail(path, f"expected an array (a list), got {_show(value)}")
            return
        for index, item in enumerate(value):
            self.check(node["items"], item, f"{path}[{index}]")

    def check_map(self, node: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.fail(path, f"expected a map (a dict), got {_show(value)}")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                self.fail(path, f"map keys must be strings, got {_show(key)}")
            self.check(node["values"], item, f"{path}[{key!r}]")

    def check_union(self, branches: list[Any], value: Any, path: str) -> None:
        resolved = [self.resolve(b) for b in branches]
        if any(not self.sub_problems(branch, value) for branch in resolved):
            return
        # A dict for a union with one record branch: say what is wrong inside it.
        records = [b for b in resolved if isinstance(b, dict) and b.get("type") == "record"]
        if isinstance(value, dict) and len(records) == 1:
            self.check_record(records[0], value, path)
            return
        labels = ", ".join(_type_label(b) for b in resolved)
        self.fail(path, f"expected one of [{labels}], got {_show(value)}")

    def sub_problems(self, node: Any, value: Any) -> list[str]:
        return datum_problems(node, value, named=self.named, strict=self.strict)


def _type_label(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return " | ".join(_type_label(b) for b in node)
    kind = node.get("type")
    if isinstance(kind, dict | list):
        return _type_label(kind)
    if node.get("logicalType"):
        return f"{kind} ({node['logicalType']})"
    if kind in ("record", "enum", "fixed"):
        return str(node["name"])
    if kind == "array":
        return f"array of {_type_label(node['items'])}"
    if kind == "map":
        return f"map of {_type_label(node['values'])}"
    return str(kind)


def _leaf_problem(node: Any, value: Any) -> str | None:
    """Why ``value`` is not a valid primitive/enum/fixed/logical datum, or None."""
    kind = node.get("type") if isinstance(node, dict) else node
    logical = node.get("logicalType") if isinstance(node, dict) else None
    if logical in _LOGICAL_ACCEPTS and isinstance(value, _LOGICAL_ACCEPTS[logical]):
        return None
    if kind == "enum":
        if value in node["symbols"]:
            return None
        return f"{value!r} is not a symbol of {node['name']} ({', '.join(node['symbols'])})"
    if kind == "fixed":
        if isinstance(value, bytes) and len(value) == node["size"]:
            return None
        return f"expected {node['size']} bytes for {node['name']}, got {_show(value)}"
    check = _PRIMITIVE_CHECKS.get(str(kind))
    if check is None or check(value):
        return None
    return f"expected {_type_label(node)}, got {_show(value)}"


def _is_int_in(bounds: tuple[int, int]) -> Any:
    def check(value: Any) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and (bounds[0] <= value <= bounds[1])
        )

    return check


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_PRIMITIVE_CHECKS: dict[str, Any] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "int": _is_int_in(_INT_RANGE),
    "long": _is_int_in(_LONG_RANGE),
    "float": _is_number,
    "double": _is_number,
    "bytes": lambda v: isinstance(v, bytes | bytearray),
    "string": lambda v: isinstance(v, str),
}

# What fastavro's writer accepts for a logical type besides the underlying type.
_LOGICAL_ACCEPTS: dict[str, type | tuple[type, ...]] = {
    "timestamp-millis": dt.datetime,
    "timestamp-micros": dt.datetime,
    "local-timestamp-millis": dt.datetime,
    "local-timestamp-micros": dt.datetime,
    "date": dt.date,
    "time-millis": dt.time,
    "time-micros": dt.time,
    "decimal": decimal.Decimal,
    "uuid": uuid.UUID,
}
