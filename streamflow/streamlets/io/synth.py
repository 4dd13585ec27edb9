"""Synthesising records of any Avro schema, deterministically from a seed.

A pipeline should be runnable before anyone has data for it: the
:class:`~streamflow.streamlets.io.Generator` falls back to this when it has no
dataset. The values are random but reproducible (one :class:`random.Random`
per synthesiser, seeded), so a test or a demo sees the same records every run.
Nothing reads the wall clock: timestamps are drawn from a fixed year.

Every value is one that the Avro writer accepts for its type (a logical type
gets its Python type: ``datetime``, ``date``, ``time``, ``Decimal``), so a
synthesised record validates and encodes. Recursive schemas terminate: past
``max_depth`` a union picks ``null`` and arrays and maps are empty.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import string
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from streamflow.schema import validate
from streamflow.schema.store import Schema

__all__ = ["Synthesiser"]

_EPOCH = dt.datetime(2024, 1, 1)
_YEAR_SECONDS = 365 * 86400
_NULL_CHANCE = 0.2


class Synthesiser:
    """Random records of ``schema``; the same ``seed`` gives the same records."""

    def __init__(
        self, schema: Schema, *, seed: int = 0, max_depth: int = 4, max_items: int = 3
    ) -> None:
        self.schema = schema
        self.max_depth = max_depth
        self.max_items = max_items
        self._named = validate.named_types(schema)
        self._rng = random.Random(seed)

    def record(self) -> dict[str, Any]:
        """One record of the schema."""
        value = self.value(self.schema.parsed, depth=0)
        if not isinstance(value, dict):  # pragma: no cover - stores hold named records
            raise TypeError(f"{self.schema.name} is not a record schema")
        return value

    def records(self, *, count: int = 0) -> Iterator[dict[str, Any]]:
        """``count`` records, or an endless stream when ``count`` is 0."""
        produced = 0
        while count <= 0 or produced < count:
            yield self.record()
            produced += 1

    def value(self, node: Any, *, depth: int) -> Any:
        """A value of the (sub)schema ``node``."""
        node = self._named.get(node, node) if isinstance(node, str) else node
        if isinstance(node, list):
            return self._union(node, depth)
        if isinstance(node, str):
            return self._primitive(node)
        kind = node.get("type")
        if isinstance(kind, dict | list):  # a wrapped type: {"type": {...}}
            return self.value(kind, depth=depth)
        logical = _LOGICAL.get(str(node.get("logicalType", "")))
        if logical is not None:
            return logical(self._rng, node)
        if kind == "record":
            return {f["name"]: self.value(f["type"], depth=depth + 1) for f in node["fields"]}
        if kind == "enum":
            return self._rng.choice(node["symbols"])
        if kind == "fixed":
            return self._rng.randbytes(node["size"])
        if kind == "array":
            return [self.value(node["items"], depth=depth + 1) for _ in self._items(depth)]
        if kind == "map":
            return {
                self._word(): self.value(node["values"], depth=depth + 1)
                for _ in self._items(depth)
            }
        return self._primitive(str(kind))

    def _union(self, branches: list[Any], depth: int) -> Any:
        non_null = [b for b in branches if b != "null"]
        has_null = len(non_null) < len(branches)
        if has_null and (not non_null or depth >= self.max_depth or self._chance(_NULL_CHANCE)):
            return None
        return self.value(self._rng.choice(non_null), depth=depth)

    def _items(self, depth: int) -> range:
        return range(0 if depth >= self.max_depth else self._rng.randint(0, self.max_items))

    def _chance(self, probability: float) -> bool:
        return self._rng.random() < probability

    def _word(self) -> str:
        return "".join(self._rng.choices(string.ascii_lowercase, k=self._rng.randint(3, 10)))

    def _primitive(self, kind: str) -> Any:
        rng = self._rng
        if kind == "null":
            return None
        if kind == "boolean":
            return self._chance(0.5)
        if kind == "int":
            return rng.randint(0, 1000)
        if kind == "long":
            return rng.randint(0, 1_000_000)
        if kind in ("float", "double"):
            return round(rng.uniform(0.0, 100.0), 3)
        if kind == "bytes":
            return rng.randbytes(rng.randint(0, 16))
        if kind == "string":
            return self._word()
        raise ValueError(f"cannot synthesise a value of the unknown type {kind!r}")


def _timestamp(*, micros: bool, aware: bool) -> Callable[[random.Random, dict[str, Any]], Any]:
    def make(rng: random.Random, node: dict[str, Any]) -> dt.datetime:
        offset = dt.timedelta(microseconds=rng.randrange(_YEAR_SECONDS * 1_000_000))
        if not micros:
            offset -= dt.timedelta(microseconds=offset.microseconds % 1000)
        moment = _EPOCH + offset
        return moment.replace(tzinfo=dt.UTC) if aware else moment

    return make


def _date(rng: random.Random, node: dict[str, Any]) -> dt.date:
    return _EPOCH.date() + dt.timedelta(days=rng.randrange(3650))


def _time(*, micros: bool) -> Callable[[random.Random, dict[str, Any]], dt.time]:
    def make(rng: random.Random, node: dict[str, Any]) -> dt.time:
        since_midnight = rng.randrange(86_400_000_000)
        if not micros:
            since_midnight -= since_midnight % 1000
        seconds, microsecond = divmod(since_midnight, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return dt.time(hour, minute, second, microsecond)

    return make


def _decimal(rng: random.Random, node: dict[str, Any]) -> decimal.Decimal:
    digits = min(int(node.get("precision", 9)), 9)
    scale = int(node.get("scale", 0))
    unscaled = rng.randrange(-(10**digits) + 1, 10**digits)
    return decimal.Decimal(unscaled).scaleb(-scale)


def _uuid(rng: random.Random, node: dict[str, Any]) -> str | bytes:
    value = uuid.UUID(int=rng.getrandbits(128), version=4)
    return value.bytes if node.get("type") == "fixed" else str(value)


def _duration(rng: random.Random, node: dict[str, Any]) -> bytes:
    return rng.randbytes(int(node.get("size", 12)))


_LOGICAL: dict[str, Callable[[random.Random, dict[str, Any]], Any]] = {
    "timestamp-millis": _timestamp(micros=False, aware=True),
    "timestamp-micros": _timestamp(micros=True, aware=True),
    "local-timestamp-millis": _timestamp(micros=False, aware=False),
    "local-timestamp-micros": _timestamp(micros=True, aware=False),
    "date": _date,
    "time-millis": _time(micros=False),
    "time-micros": _time(micros=True),
    "decimal": _decimal,
    "uuid": _uuid,
    "duration": _duration,
}
