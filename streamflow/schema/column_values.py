"""Records and columns, each made from the other: the batch that :mod:`.columns` decodes.

The columnar codec holds a batch as :class:`Columns`, numpy columns by dotted
field path. This module is the pure half of it: the layout of a record
schema's columns, the columns made from fastavro's decoded records (the
fallback decode, and :meth:`Columns.from_records` for codecs with no column
form), the records rebuilt from columns (:func:`records_of`), and columns to
and from the shapes the native module answers and takes. Nothing here decodes
or encodes bytes; :mod:`streamflow.schema.columns` does, and is where users
import these from.

The rules match the native module's, so that a batch gives the same columns
whichever path made them: numbers are 1-D arrays (masked where the field is
nullable), timestamps and dates are ``datetime64``, numeric arrays of one shape
in the whole batch are one n-d array, and everything else is an object array
of fastavro's Python values.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from fastavro._logical_readers import LOGICAL_READERS

from streamflow.schema import validate
from streamflow.schema.store import Schema

__all__ = [
    "MISSING",
    "Col",
    "Columns",
    "from_native",
    "layout",
    "native_source",
    "native_units",
    "python_values",
    "records_of",
    "to_columns",
    "to_records",
]

_UTC = dt.UTC
_NUM = {"boolean": "bool", "int": "int32", "long": "int64", "float": "float32", "double": "float64"}
_TIME = {
    "timestamp-millis": ("long", "ms"),
    "timestamp-micros": ("long", "us"),
    "date": ("int", "D"),
}

#: the value of a field whose column was not given (an encode then fails that record)
MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "<missing>"})()


@dataclass(frozen=True)
class Col:
    """One column of the flattened layout: how its values are held."""

    path: str
    kind: str  # "num", "time", "nd" or "obj"
    dtype: str = "object"  # numpy dtype of a num or nd column; unit of a time one
    depth: int = 0  # nesting of an nd column
    nullable: bool = False


def layout(schema: Schema) -> list[Col]:
    """The columns of a record schema, as the native module lays them out."""
    named = validate.named_types(schema)

    def deref(node: Any) -> Any:
        return named.get(node, node) if isinstance(node, str) else node

    def plain(node: Any) -> tuple[str | None, str | None]:  # (type, logicalType)
        node = deref(node)
        if isinstance(node, dict) and not isinstance(node.get("type"), str | None):
            return plain(node["type"])
        if isinstance(node, dict):
            return node.get("type"), node.get("logicalType")
        return (node, None) if isinstance(node, str) else (None, None)

    def leaf(path: str, node: Any) -> Col:
        node = deref(node)
        if isinstance(node, list) and len(node) == 2 and (node[0] == "null") != (node[1] == "null"):
            inner = leaf(path, node[1] if node[0] == "null" else node[0])
            nullable = inner.kind in ("num", "time")
            return (
                Col(path, inner.kind, inner.dtype, nullable=True) if nullable else Col(path, "obj")
            )
        kind, logical = plain(node)
        known = f"{kind}-{logical}" in LOGICAL_READERS
        if kind in _NUM and not known:
            return Col(path, "num", _NUM[kind])
        if logical in _TIME and _TIME[logical][0] == kind and known:
            return Col(path, "time", _TIME[logical][1])
        depth = 0
        while isinstance(node, dict) and node.get("type") == "array" and "logicalType" not in node:
            node, depth = deref(node["items"]), depth + 1
        kind, logical = plain(node)
        if depth and kind in _NUM and f"{kind}-{logical}" not in LOGICAL_READERS:
            return Col(path, "nd", _NUM[kind], depth)
        return Col(path, "obj")

    def record(node: dict[str, Any], prefix: str, seen: list[str]) -> list[Col]:
        cols: list[Col] = []
        for field in node["fields"]:
            path = f"{prefix}{field['name']}"
            ftype = deref(field["type"])
            is_record = isinstance(ftype, dict) and ftype.get("type") in ("record", "error")
            if is_record and ftype["name"] not in seen:  # a recursive one stays whole
                cols += record(ftype, path + ".", [*seen, ftype["name"]])
            else:
                cols.append(leaf(path, ftype))
        return cols

    return record(schema.raw, "", [schema.raw["name"]])


class Columns:
    """A decoded batch: columns by (dotted) field name, and what did not decode."""

    def __init__(
        self,
        layout: list[Col],
        rows: np.ndarray,
        errors: list[tuple[int, str]],
        columns: dict[str, Any],
    ) -> None:
        self._layout = layout
        self.n = len(rows)
        self.rows = rows
        self.errors = errors
        self.columns = columns

    @classmethod
    def from_records(
        cls,
        schema: Schema,
        records: Sequence[dict[str, Any]],
        *,
        rows: Sequence[int] | np.ndarray | None = None,
        errors: list[tuple[int, str]] | None = None,
    ) -> Columns:
        """Columns of records already decoded (dicts as fastavro returns them).

        The same columns the decode makes of the same records, for a topic whose
        codec has no column form (JSON) and for tests. ``rows`` are the records'
        places in their batch (0, 1, ... by default), ``errors`` the records of
        that batch that did not decode.
        """
        cols = layout(schema)
        index = np.arange(len(records)) if rows is None else np.asarray(rows)
        if index.shape != (len(records),):
            raise ValueError(f"{len(records)} records need as many rows, not {index.shape}")
        columns = to_columns(cols, list(records))
        return cls(cols, index.astype(np.int64), list(errors or []), columns)

    def column(self, name: str) -> Any:
        return self.columns[name]

    def take(self, places: Sequence[int] | np.ndarray) -> Columns:
        """Only the decoded rows at ``places`` (0 to n-1), in that order; no errors."""
        index = np.asarray(places, dtype=np.int64)
        columns = {name: column[index] for name, column in self.columns.items()}
        return Columns(self._layout, self.rows[index], [], columns)

    def to_records(self) -> list[dict[str, Any]]:
        """The records, exactly as fastavro's ``schemaless_reader`` returns them."""
        return to_records(self._layout, self.columns, self.n)

    def __repr__(self) -> str:
        return f"Columns(n={self.n}, errors={len(self.errors)}, columns={list(self.columns)})"


def records_of(schema: Schema, columns: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """The ``n`` records (dicts, as fastavro writes them) that columns in ``schema``'s layout hold.

    The inverse of :meth:`Columns.from_records`, for encoding through a
    per-record codec. A nested record may be one column of dicts. A field whose
    column is not there is left out of the records: the codec then writes its
    default, or fails each record naming the field, as it does for a record.
    """
    return to_records(layout(schema), columns, n, missing="omit")


def from_native(
    cols: list[Col], rows: np.ndarray, errors: list[Any], native: list[Any], late: list[Any]
) -> tuple[np.ndarray, list[tuple[int, str]], dict[str, Any]]:
    """The rows, errors and numpy columns of the native decoder's answer.

    ``late`` are records whose values fastavro's converters refused after the
    columns were built: they become errors, and are dropped from every column.
    """
    out: dict[str, Any] = {}
    by_path = {c.path: c for c in cols}
    for path, (kind, data, mask, extra) in native:
        if kind == "time":
            data = data.view(f"datetime64[{extra}]")
        elif kind in ("obj", "ndobj"):
            data = np.fromiter(data, dtype=object, count=len(data))
        if by_path[path].nullable:
            data = np.ma.MaskedArray(data, mask=np.zeros(len(data), bool) if mask is None else mask)
        out[path] = data
    if late:
        keep = np.ones(len(rows), bool)
        keep[[pos for pos, _ in late]] = False
        errors = sorted([*errors, *((int(rows[pos]), why) for pos, why in late)])
        rows = rows[keep]
        out = {k: v[keep] for k, v in out.items()}
    return rows, errors, out


def native_units(
    cols: list[Col], entries: list[tuple[str, Any, bool]], columns: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """What the native encoder takes: one unit per column, in the order fields are written.

    ``entries`` are the encoder's ``(path, schema node, is a record)``; a record
    given whole as one column stands for every path under it.
    """
    kinds = {c.path: c for c in cols}
    units, skip = [], None
    for path, node, is_record in entries:
        if skip and path.startswith(skip):
            continue
        if path in columns:
            units.append((node, path, *native_source(columns[path], kinds.get(path))))
            skip = path + "."
        elif not is_record:
            units.append((node, path, "missing", None, None))
    return units


def native_source(column: Any, col: Col | None) -> tuple[str, Any, Any]:
    """A column as the native encoder takes it: ``(kind, data, mask)``."""
    mask = None
    if isinstance(column, np.ma.MaskedArray):
        mask = np.ascontiguousarray(np.ma.getmaskarray(column))
        column = column.data
    if isinstance(column, np.ndarray) and column.dtype.kind in "iubfM":
        if column.dtype.kind == "M":
            if col is None or col.kind != "time":
                return "obj", python_values(column, col), None
            column = column.astype(f"datetime64[{col.dtype}]").view(np.int64)
        kind = {"b": "bool", "f": "f64"}.get(column.dtype.kind, "i64")
        dtype = {"bool": np.bool_, "f64": np.float64, "i64": np.int64}[kind]
        return kind, np.ascontiguousarray(column, dtype=dtype), mask
    values = list(column)
    if mask is not None:
        values = [None if m else v for v, m in zip(values, mask, strict=False)]
    return "obj", values, None


def python_values(column: Any, col: Col | None) -> list[Any]:
    """A column as fastavro's Python values, one per record."""
    if isinstance(column, np.ma.MaskedArray):
        mask = np.ma.getmaskarray(column)
        values = python_values(column.data, col)
        return [None if m else v for v, m in zip(values, mask, strict=False)]
    if not isinstance(column, np.ndarray):
        return [v.tolist() if isinstance(v, np.ndarray) else v for v in column]
    if column.dtype.kind == "M":
        unit = np.datetime_data(column.dtype)[0]
        if unit == "D":
            return list(column.astype(object))
        naive = column.astype("datetime64[us]").astype(object)
        return [v.replace(tzinfo=_UTC) if v is not None else None for v in naive]
    if column.dtype == object:
        return [v.tolist() if isinstance(v, np.ndarray) else v for v in column]
    return column.tolist()  # type: ignore[no-any-return]


def to_records(
    cols: list[Col],
    columns: Mapping[str, Any],
    n: int,
    *,
    missing: Literal["raise", "mark", "omit"] = "raise",
) -> list[dict[str, Any]]:
    """Rebuild the records (nested dicts) from columns.

    A column that is not there is a KeyError (``raise``), gives :data:`MISSING`
    values so that the encoder fails each record alone (``mark``), or leaves its
    field out of the records, for a codec to fill with the field's default
    (``omit``).
    """
    records: list[dict[str, Any]] = [{} for _ in range(n)]
    done: set[str] = set()
    for col in cols:
        parts = col.path.split(".")
        # a nested record may be given whole, as a column of dicts (for encode)
        given = next(
            (
                ".".join(parts[:k])
                for k in range(1, len(parts) + 1)
                if ".".join(parts[:k]) in columns
            ),
            None,
        )
        if given is None and missing != "mark":
            if missing == "raise":
                raise KeyError(col.path)
            continue
        if given in done:
            continue
        done.add(given or col.path)
        values = python_values(columns[given], col) if given else [MISSING] * n
        keys = (given or col.path).split(".")
        for record, value in zip(records, values, strict=False):
            for key in keys[:-1]:
                record = record.setdefault(key, {})
            record[keys[-1]] = value
    return records


def to_columns(cols: list[Col], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Columns from fastavro's records (the fallback path), as the native path makes them."""
    n, out = len(records), {}
    for col in cols:
        values: list[Any] = []
        for record in records:
            value: Any = record
            for key in col.path.split("."):
                value = value[key]
            values.append(value)
        # fastavro's values can differ in type from what the reader says (a writer's
        # logical type wins): then the column holds them as they are
        typed = dt.date if col.kind == "time" else (int, float)
        if col.kind in ("num", "time") and all(v is None or isinstance(v, typed) for v in values):
            nulls = np.array([v is None for v in values], dtype=bool)
            if col.kind == "time":
                values = [0 if v is None else _datetime64(v, col.dtype) for v in values]
                data = np.array(values, dtype=np.int64).view(f"datetime64[{col.dtype}]")
            else:
                data = np.array([0 if v is None else v for v in values], dtype=col.dtype)
            out[col.path] = np.ma.MaskedArray(data, mask=nulls) if col.nullable else data
        elif col.kind == "nd" and all(isinstance(v, list) for v in values):
            out[col.path] = _nd(values, col)
        else:
            out[col.path] = np.fromiter(values, dtype=object, count=n)
    return out


def _datetime64(value: dt.date, unit: str) -> int:
    if isinstance(value, dt.datetime):
        delta = value - dt.datetime(1970, 1, 1, tzinfo=_UTC)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros // 1000 if unit == "ms" else micros
    return value.toordinal() - dt.date(1970, 1, 1).toordinal()


def _shape(value: Any, depth: int) -> tuple[int, ...] | None:
    """The shape of nested lists ``depth`` deep, or None where they are ragged."""
    level, shape = [value], []
    for _ in range(depth):
        lengths = {len(v) for v in level}
        if len(lengths) > 1:
            return None
        shape.append(lengths.pop() if lengths else 0)
        level = [item for v in level for item in v]
        if not level:
            return tuple(shape + [0] * (depth - len(shape)))
    return tuple(shape)


def _nd(values: list[Any], col: Col) -> np.ndarray:
    shapes = [_shape(v, col.depth) for v in values]
    first = shapes[0] if shapes and shapes[0] is not None else (0,) * col.depth
    arrays = [
        np.array(v, dtype=col.dtype).reshape(s) if s is not None else v
        for v, s in zip(values, shapes, strict=True)
    ]
    if all(s == first for s in shapes):
        return np.array(arrays, dtype=col.dtype).reshape((len(values), *first))
    return np.fromiter(arrays, dtype=object, count=len(arrays))
