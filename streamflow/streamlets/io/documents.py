"""Records to and from JSON: what the file, console and HTTP streamlets share.

Inbound, every JSON document goes through the schema's
:class:`~streamflow.schema.JsonCodec` (coercion, then validation) and is cut to
the schema's fields: what reaches Kafka is exactly a record of the schema, and
all the built-ins accept and reject the same documents with the same reasons.
Unknown top-level fields are dropped rather than rejected, as an Avro reader
drops fields its schema does not have.

Outbound, Avro values that JSON lacks are written the usual way: bytes as
base64, datetimes, dates and times in ISO 8601, decimals and UUIDs as strings.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid
from dataclasses import dataclass
from typing import Any

from streamflow.api.ports import Emit
from streamflow.api.streamlet import Record
from streamflow.schema.codecs import DecodeError, JsonCodec
from streamflow.schema.store import Schema
from streamflow.streamlets.io import _binding

__all__ = ["Problem", "RecordConverter", "dumps", "egress_document", "problems_of"]


class RecordConverter:
    """JSON documents to records of ``schema``, and records to outputs for ``outlet``."""

    def __init__(self, schema: Schema, *, outlet: str, key_field: str = "") -> None:
        _binding.check_key_field(schema, key_field)
        self.schema = schema
        self.outlet = outlet
        self.key_field = key_field
        self.codec = JsonCodec(schema)
        self._fields = frozenset(schema.field_names())

    def convert(self, doc: Any) -> dict[str, Any]:
        """The record for ``doc``; :class:`DecodeError` says every reason it is invalid."""
        value = self.codec.from_json(doc)
        return {name: item for name, item in value.items() if name in self._fields}

    def output(self, value: dict[str, Any]) -> Emit:
        """The output for a record: keyed by ``key_field`` if set, else as the outlet keys it."""
        if self.key_field:
            return Emit(self.outlet, value, _binding.key_of(value.get(self.key_field)))
        return Emit(self.outlet, value)


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a document is invalid: where (a field path, an array index) and why."""

    message: str
    path: str = ""
    index: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.index is not None:
            out["index"] = self.index
        if self.path:
            out["field"] = self.path
        out["message"] = self.message
        return out


def problems_of(error: DecodeError, *, index: int | None = None) -> list[Problem]:
    """The individual reasons inside a :class:`DecodeError` from ``JsonCodec.from_json``."""
    listed = getattr(error, "problems", None)
    if isinstance(listed, list) and listed and all(isinstance(p, str) for p in listed):
        items: list[str] = listed
    else:
        text = str(error)
        head, sep, tail = text.partition(": ")
        items = tail.split("; ") if sep and head.startswith("not a valid ") else [text]
    return [_problem(item, index) for item in items]


def _problem(item: str, index: int | None) -> Problem:
    path, sep, message = item.partition(": ")
    if sep and path and " " not in path:
        return Problem(message, path, index)
    return Problem(item, "", index)


def egress_document(record: Record, *, include_key: bool) -> Any:
    """What an egress writes for ``record``: its value, or ``{"key", "value"}``."""
    if include_key:
        return {"key": record.key, "value": record.value}
    return record.value


def dumps(doc: Any, *, pretty: bool = False) -> str:
    """JSON text for a document holding Avro values; one line unless ``pretty``."""
    if pretty:
        return json.dumps(doc, default=_json_default, ensure_ascii=False, indent=2)
    return json.dumps(doc, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
