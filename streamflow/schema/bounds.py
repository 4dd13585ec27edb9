"""How much a record may cost once decoded, checked before it is decoded.

Avro lets a few bytes declare a great deal: an array block says how many items
follow, and an item of ``null`` (or of an empty record) takes no bytes at all,
so 15 bytes can declare 100,000,000 items. fastavro builds what the bytes
declare, so the bound has to come first.

Every decoder of record values (the single-object and registry Avro codecs, the
JSON codecs, and any native codec added later) asks this module, so one set of
:class:`DecodeLimits` holds on every path:

* ``max_items``: the items of one array, or entries of one map;
* ``max_record_bytes``: the decoded size of one record;
* ``max_batch_bytes``: the decoded size of what one batch holds at once (the
  processor cuts a batch there and takes the rest in the next one).

The decoded size is an estimate of what CPython holds for the value, from a
fixed cost per kind (:data:`_COST`): it is an upper bound for the common
builds, not a measurement. What keeps the check off the hot path is a bound
computed once per writer schema: ``cost <= a + b * len(body)`` for every body
the schema can read. A record whose length proves it within the limits is not
walked; one that does not (a long record, or any record of a schema with an
array of zero-size items, whose ``b`` is infinite) is walked first, without
building anything, and refused as soon as it passes a limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamflow.schema import fields
from streamflow.schema.fields import declared

__all__ = [
    "DEFAULT_LIMITS",
    "DecodeLimits",
    "RecordBound",
    "TooLarge",
    "json_bound",
    "json_items",
]

_MI = 1024 * 1024


class TooLarge(ValueError):
    """A record past a decode limit; the message is one line, for a dead letter."""


@dataclass(frozen=True)
class DecodeLimits:
    """What one record may declare, and what a batch may hold, once decoded."""

    max_items: int = field(
        default=1_000_000,
        metadata=declared("Items in one array or map (1000000).", minimum=1),
    )
    max_record_bytes: int = field(
        default=64 * _MI, metadata=declared("Bytes of one decoded record (64Mi).", minimum=1)
    )
    max_batch_bytes: int = field(
        default=256 * _MI,
        metadata=declared("Bytes a batch holds decoded; a batch is cut there (256Mi).", minimum=1),
    )

    def __post_init__(self) -> None:
        for name in ("max_items", "max_record_bytes", "max_batch_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_batch_bytes < self.max_record_bytes:
            raise ValueError(
                f"max_batch_bytes ({self.max_batch_bytes}) is smaller than max_record_bytes "
                f"({self.max_record_bytes}): a record within its own limit would fit no batch"
            )

    def to_dict(self) -> dict[str, int]:
        return fields.to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> DecodeLimits:
        return fields.from_plain(cls, data) if data else DEFAULT_LIMITS


DEFAULT_LIMITS = DecodeLimits()

# CPython's memory per decoded value, rounded up (64-bit): the object, not the slot
# that holds it, which its container counts.
_COST = {
    "null": 0,  # None, True, False and an enum's symbols are shared objects
    "boolean": 0,
    "int": 32,
    "long": 32,
    "float": 24,
    "double": 24,
}
_STR = 80  # + 4 per byte: a string with one 4-byte character stores 4 bytes for each
_BYTES = 40  # + 1 per byte (bytes and fixed)
_DICT, _DICT_ENTRY = 64, 48  # a record or map, and each field or entry in it
_LIST, _LIST_ITEM = 56, 8
_MIN_SIZE = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8}
_WIDTH = {"boolean": 1, "float": 4, "double": 8}  # fixed encoded widths


@dataclass(frozen=True)
class _Shape:
    """One type's static facts: ``cost <= a + b * encoded``; its least encoded size;
    its encoded width when every value has the same one (else None)."""

    a: float
    b: float
    min_size: int
    width: int | None
    walk: Callable[[_Walk, int], int]  # (walk, pos) -> pos after the value; adds its cost


class _Walk:
    """The state of one walk over a record's body."""

    __slots__ = ("cost", "data", "limits")

    def __init__(self, data: bytes, limits: DecodeLimits) -> None:
        self.data = data
        self.limits = limits
        self.cost = 0

    def add(self, cost: float) -> None:
        self.cost += int(cost)
        if self.cost > self.limits.max_record_bytes:
            raise TooLarge(
                f"the record decodes to more than {_size(self.limits.max_record_bytes)} "
                "(decode_limits.max_record_bytes)"
            )

    def long(self, pos: int) -> tuple[int, int]:
        data, shift, value = self.data, 0, 0
        while True:
            if pos >= len(data):
                raise EOFError("the record ends in the middle of a number")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (value >> 1) ^ -(value & 1), pos
            shift += 7
            if shift > 63:
                raise ValueError("a number longer than 10 bytes")

    def skip(self, pos: int, n: int) -> int:
        end = pos + n
        if n < 0 or end > len(self.data):
            raise EOFError("the record ends in the middle of a value")
        return end


class RecordBound:
    """The decode limits of one writer schema, compiled once.

    ``check(data, start)`` returns the decoded size of the body at ``data[start:]``
    (an upper bound where the length alone proves the limits hold), or raises
    :class:`TooLarge`. Malformed bodies are left to the decoder to describe.
    """

    def __init__(self, raw: Any, limits: DecodeLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._named: dict[str, _Shape | None] = {}  # None: being compiled (recursive)
        self._recursive = False
        self._has_containers = False
        shape = self._shape(raw)
        self._root = shape
        self.a = shape.a
        self.b = math.inf if self._recursive else shape.b
        #: the bound as integers, for the hot path: ``cost <= fixed + per_byte * len(body)``
        self.fixed = math.ceil(self.a)
        self.per_byte = math.ceil(self.b) if self.b != math.inf else 0
        room = limits.max_record_bytes - shape.a
        by_cost = math.inf if self.b == 0 else room / self.b
        # a container item takes at least a byte here (zero-size ones make b infinite)
        by_items = limits.max_items if self._has_containers else math.inf
        #: bodies up to this many bytes are within the limits without a walk (-1: none is)
        self.walk_above = (
            -1 if self.b == math.inf else max(-1, int(min(by_cost, by_items, 1 << 62)))
        )

    def check(self, data: bytes, start: int) -> int:
        n = len(data) - start
        if n <= self.walk_above:
            return self.fixed + self.per_byte * n
        walk = _Walk(data, self.limits)
        try:
            self._root.walk(walk, start)
        except (EOFError, ValueError, IndexError) as exc:
            if isinstance(exc, TooLarge):
                raise
            return n  # malformed: the decoder says how (it stops at the same place)
        return walk.cost

    # -- compiling -----------------------------------------------------------

    def _shape(self, schema: Any) -> _Shape:
        if isinstance(schema, str):
            if schema in _COST:
                return _primitive(schema)
            if schema == "string":
                return _string(_STR, 4)
            if schema == "bytes":
                return _string(_BYTES, 1)
            named = self._named.get(schema)
            if named is None:  # recursive (or unknown): walk every record
                self._recursive = True
                return _Shape(0, math.inf, 0, None, self._later(schema))
            return named
        if isinstance(schema, list):
            return self._union([self._shape(branch) for branch in schema])
        kind = schema.get("type")
        if kind in ("record", "error"):
            name = schema.get("name", "")
            self._named[name] = None
            shape = self._record([self._shape(f["type"]) for f in schema.get("fields", ())])
        elif kind == "enum":
            name = schema.get("name", "")
            shape = _Shape(0, 0, 1, None, _skip_long)
        elif kind == "fixed":
            name = schema.get("name", "")
            size = int(schema.get("size", 0))
            shape = _Shape(_BYTES + size, 0, size, size, _skip_width(size, cost=_BYTES + size))
        elif kind == "array":
            self._has_containers = True
            return self._array(self._shape(schema["items"]), entry=0, key=None)
        elif kind == "map":
            self._has_containers = True
            return self._array(self._shape(schema["values"]), entry=1, key=_string(_STR, 4))
        else:  # {"type": "int", "logicalType": ...} and the like
            return self._shape(kind)
        self._named[name] = shape
        return shape

    def _later(self, name: str) -> Callable[[_Walk, int], int]:
        """A walker for a named type compiled after the reference to it (recursion)."""

        def walk(w: _Walk, pos: int) -> int:
            shape = self._named.get(name)
            if shape is None:
                raise ValueError(f"unknown type {name}")
            return shape.walk(w, pos)

        return walk

    @staticmethod
    def _record(fields: list[_Shape]) -> _Shape:
        a = _DICT + sum(_DICT_ENTRY + f.a for f in fields)
        b = max((f.b for f in fields), default=0.0)
        min_size = sum(f.min_size for f in fields)
        widths = [f.width for f in fields if f.width is not None]
        width = sum(widths) if len(widths) == len(fields) else None
        if width is not None:
            return _Shape(a, b, min_size, width, _skip_width(width, cost=a))
        walks = tuple(f.walk for f in fields)

        def walk(w: _Walk, pos: int) -> int:
            w.add(_DICT + _DICT_ENTRY * len(walks))
            for field_walk in walks:
                pos = field_walk(w, pos)
            return pos

        return _Shape(a, b, min_size, None, walk)

    @staticmethod
    def _union(branches: list[_Shape]) -> _Shape:
        walks = tuple(b.walk for b in branches)

        def walk(w: _Walk, pos: int) -> int:
            index, pos = w.long(pos)
            if not 0 <= index < len(walks):
                raise ValueError(f"union branch {index} out of range")
            return walks[index](w, pos)

        return _Shape(
            max((b.a for b in branches), default=0.0),
            max((b.b for b in branches), default=0.0),
            1 + min((b.min_size for b in branches), default=0),
            None,
            walk,
        )

    def _array(self, item: _Shape, *, entry: int, key: _Shape | None) -> _Shape:
        """An array (``key`` None) or a map (each entry a string key and a value)."""
        limits = self.limits
        per_item = (_DICT_ENTRY if key else _LIST_ITEM) + item.a + (key.a if key else 0)
        least = item.min_size + entry
        b = math.inf if least == 0 else max(item.b, key.b if key else 0) + per_item / least
        what = "map" if key else "array"
        width = item.width if key is None else None
        key_walk = key.walk if key is not None else None

        def walk(w: _Walk, pos: int) -> int:
            w.add(_DICT if key else _LIST)
            total = 0
            while True:
                count, pos = w.long(pos)
                if count == 0:
                    return pos
                if count < 0:  # a block that gives its byte size too
                    count = -count
                    _, pos = w.long(pos)
                total += count
                if total > limits.max_items:
                    raise TooLarge(
                        f"an {what} declares more than {limits.max_items:,} items "
                        "(decode_limits.max_items)"
                    )
                if width is not None:  # same-width items (zero-size ones too): no loop
                    w.add(count * per_item)
                    pos = w.skip(pos, count * width)
                    continue
                for _ in range(count):
                    w.add(per_item - item.a - (key.a if key else 0))
                    if key_walk is not None:
                        pos = key_walk(w, pos)
                    pos = item.walk(w, pos)

        return _Shape(_DICT if key else _LIST, b, 1, None, walk)


def _primitive(kind: str) -> _Shape:
    cost = _COST[kind]
    width = _WIDTH.get(kind)
    if kind == "null":
        width = 0
    if width is not None:
        return _Shape(cost, 0, width, width, _skip_width(width, cost=cost))

    def walk(w: _Walk, pos: int) -> int:
        w.add(cost)
        return w.long(pos)[1]

    return _Shape(cost, 0, _MIN_SIZE[kind], None, walk)


def _string(base: int, per_byte: int) -> _Shape:
    def walk(w: _Walk, pos: int) -> int:
        n, pos = w.long(pos)
        w.add(base + per_byte * max(n, 0))
        return w.skip(pos, n)

    return _Shape(base, per_byte, 1, None, walk)


def _skip_long(w: _Walk, pos: int) -> int:
    return w.long(pos)[1]


def _skip_width(width: int, *, cost: float = 0) -> Callable[[_Walk, int], int]:
    def walk(w: _Walk, pos: int) -> int:
        if cost:
            w.add(cost)
        return w.skip(pos, width)

    return walk


def json_bound(data: bytes | str, limits: DecodeLimits) -> int:
    """The decoded size of a JSON text, bounded before it is parsed; refused past the limit.

    Each JSON value but the first follows a ``,`` or a ``:``, or opens with ``[`` or
    ``{``, so those characters count the values; a value costs at most a string's
    fixed part or a container's, plus 4 per character (:data:`_STR`). A short text
    is bounded by its length alone (as if every character were a value), unscanned.
    """
    n = len(data)
    per_value = _STR + _DICT_ENTRY
    if n <= _JSON_UNSCANNED and (per_value + 4) * n <= limits.max_record_bytes:
        return (per_value + 4) * n
    text = data.encode() if isinstance(data, str) else data
    values = 1 + sum(text.count(c) for c in (b",", b":", b"[", b"{"))
    size = values * per_value + 4 * n
    if size > limits.max_record_bytes:
        raise TooLarge(
            f"the JSON text may decode to more than {_size(limits.max_record_bytes)} "
            f"({n:,} characters, up to {values:,} values; decode_limits.max_record_bytes)"
        )
    return size


_JSON_UNSCANNED = 4096  # (128 + 4) * 4096 bytes is within any sane record limit


def json_items(value: list[Any] | dict[str, Any], limits: DecodeLimits) -> None:
    """Refuse a parsed JSON array or object with more items than ``max_items``."""
    if len(value) > limits.max_items:
        what = "array" if isinstance(value, list) else "object"
        raise TooLarge(
            f"a JSON {what} holds {len(value):,} items, more than {limits.max_items:,} "
            "(decode_limits.max_items)"
        )


def _size(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n:,} bytes"
