"""Codecs turn record values into bytes and back.

The default is Avro single-object encoding: ``C3 01``, the writer schema's
8-byte CRC-64-AVRO fingerprint (little-endian), then the Avro binary body. The
fingerprint lets a reader resolve data written with an older or newer version
of a schema without a registry, as long as the writer schema is on its search
paths. The codec is on the hot path of every record, so it avoids per-record
allocations beyond the one buffer fastavro needs.

The JSON codec is for systems outside Kafka (HTTP bodies, files): plain JSON
objects, coerced to the schema's types on the way in and validated.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import decimal
import io
import json
import uuid
from typing import Any, Protocol

from fastavro import schemaless_reader, schemaless_writer
from fastavro.validation import validate as fastavro_validate

from streamflow.schema import bounds, compat, validate
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits, RecordBound
from streamflow.schema.store import Schema, SchemaStore

__all__ = [
    "MAGIC",
    "Codec",
    "DecodeError",
    "EncodeError",
    "JsonCodec",
    "JsonTopicCodec",
    "SingleObjectCodec",
    "bounded",
    "describe_encode_error",
    "error_line",
]

MAGIC = b"\xc3\x01"
_HEADER_LEN = 10


class DecodeError(ValueError):
    """Bytes that are not a valid encoding of the expected schema."""


class EncodeError(ValueError):
    """A value that does not match the schema it is written with."""


class Codec(Protocol):
    schema: Schema
    #: the decoded size of the last record ``decode`` returned (an upper-bound estimate,
    #: see :mod:`streamflow.schema.bounds`): what a batch adds up against its limit
    last_size: int

    def encode(self, value: dict[str, Any]) -> bytes: ...

    def decode(self, data: bytes) -> dict[str, Any]: ...


class SingleObjectCodec:
    """Avro single-object encoding for one reader/writer schema.

    ``store`` is consulted only when a record carries a fingerprint other than
    our own schema's: the writer's schema is then looked up and resolved
    against ours with the Avro resolution rules.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        store: SchemaStore | None = None,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        self.schema = schema
        self._store = store
        self._header = MAGIC + schema.fingerprint.to_bytes(8, "little")
        self._parsed = schema.parsed
        # A record schema reads as a dict: checked here once, not once a record.
        self._is_record = schema.raw.get("type") in ("record", "error")
        self._writers: dict[bytes, Any] = {}
        self._writer_schemas: dict[bytes, Schema] = {}
        self.limits = limits
        self._bound = RecordBound(schema.raw, limits)
        self._bounds: dict[bytes, RecordBound] = {}  # of other writers, by fingerprint
        self.last_size = 0

    @property
    def header(self) -> bytes:
        return self._header

    def encode(self, value: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            schemaless_writer(buf, self._parsed, value)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(describe_encode_error(self.schema, value, exc)) from None
        return buf.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        header = self._header
        if data.startswith(header):
            # The common case, checked in one comparison: our own schema wrote it.
            writer, reader, bound = self._parsed, None, self._bound
        elif data[:2] != MAGIC:
            raise DecodeError(
                "not Avro single-object encoded (expected marker C3 01, "
                f"got {data[:2].hex(' ') or 'empty'})"
            )
        elif len(data) < _HEADER_LEN:
            raise DecodeError(
                f"truncated Avro single-object header: {len(data)} bytes, "
                f"the marker and fingerprint alone take {_HEADER_LEN}"
            )
        else:
            writer, reader = self._writer_for(data[2:_HEADER_LEN]), self._parsed
            bound = self._bounds[data[2:_HEADER_LEN]]
        # before fastavro builds what the bytes declare (a length check on the hot path)
        n = len(data) - _HEADER_LEN
        if n > bound.walk_above:
            self.last_size = bounded(bound, data, _HEADER_LEN)
        else:
            self.last_size = bound.fixed + bound.per_byte * n
        buf = io.BytesIO(data)
        buf.seek(_HEADER_LEN)
        try:
            record = schemaless_reader(buf, writer, reader)
        except Exception as exc:  # fastavro raises ValueError, IndexError, SchemaResolutionError...
            if reader is not None:
                writer_schema = self._writer_schemas[data[2:_HEADER_LEN]]
                problems = compat.compatibility_problems(reader=self.schema, writer=writer_schema)
                if problems:  # else a corrupt record of a compatible writer: say that
                    raise self._unresolvable(writer_schema, problems) from None
            raise self._unreadable(data, exc) from None
        if buf.tell() != len(data):
            raise DecodeError(
                f"{len(data) - buf.tell()} trailing bytes after the {self.schema.name} record"
            )
        if not self._is_record and not isinstance(record, dict):
            raise DecodeError(f"{self.schema.name} did not decode to a record")
        return record  # type: ignore[return-value]  # a record schema reads as a dict

    def _unreadable(self, data: bytes, exc: Exception) -> DecodeError:
        if isinstance(exc, EOFError):
            return DecodeError(
                f"cannot decode {self.schema.name}: the record is truncated "
                f"({len(data)} bytes end in the middle of a value)"
            )
        return DecodeError(f"cannot decode {self.schema.name}: {error_line(exc)}")

    def _unresolvable(self, writer: Schema, problems: list[str]) -> DecodeError:
        """One line: which schema wrote the record, and why ours cannot read it.

        fastavro's own message prints both parsed schemas whole (2,000 characters in
        a dead letter's header); the compatibility checker says what differs.
        """
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return DecodeError(
            f"a {writer.name} record ({writer.fingerprint_hex}) cannot be read as "
            f"{self.schema.name} ({self.schema.fingerprint_hex}): {problems[0]}{more}"
        )

    def _writer_for(self, fingerprint: bytes) -> Any:
        cached = self._writers.get(fingerprint)
        if cached is not None:
            return cached
        number = int.from_bytes(fingerprint, "little")
        writer = self._store.by_fingerprint(number) if self._store else None
        if writer is None:
            raise DecodeError(
                f"unknown writer schema fingerprint {number:016x}; expected "
                f"{self.schema.name} ({self.schema.fingerprint_hex}). If it is an older "
                "version, put that version under a history/ directory on the schema paths"
            )
        self._bounds[fingerprint] = RecordBound(writer.raw, self.limits)
        self._writers[fingerprint] = writer.parsed
        self._writer_schemas[fingerprint] = writer
        return writer.parsed


def bounded(bound: RecordBound, data: bytes, start: int) -> int:
    """The decoded size of a record that its length does not prove within the limits."""
    try:
        return bound.check(data, start)
    except bounds.TooLarge as exc:
        raise DecodeError(f"refused before decoding: {exc}") from None


def error_line(exc: Exception, limit: int = 200) -> str:
    """An exception as one short line: its type and the start of its first line."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class JsonCodec:
    """Plain JSON objects, coerced to the schema's types and validated."""

    def __init__(self, schema: Schema, *, limits: DecodeLimits = DEFAULT_LIMITS) -> None:
        self.schema = schema
        self.limits = limits
        self._coercer = _Coercer(validate.named_types(schema), limits)
        self.last_size = 0

    def encode(self, value: dict[str, Any]) -> bytes:
        return json.dumps(value, default=_json_default, separators=(",", ":")).encode()

    def decode(self, data: bytes) -> dict[str, Any]:
        try:
            size = bounds.json_bound(data, self.limits)
            doc = json.loads(data)
        except bounds.TooLarge as exc:
            raise DecodeError(f"refused before decoding: {exc}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DecodeError(f"not valid JSON: {exc}") from None
        except RecursionError:
            raise DecodeError("not valid JSON: nested too deeply to read") from None
        self.last_size = size
        return self.from_json(doc)

    def from_json(self, doc: Any) -> dict[str, Any]:
        """Coerce a parsed JSON value into a record of this schema, or explain why not."""
        if not isinstance(doc, dict):
            raise DecodeError(f"expected a JSON object for {self.schema.name}")
        try:
            value = self._coercer.coerce(self.schema.parsed, doc)
        except bounds.TooLarge as exc:
            raise DecodeError(f"refused: {exc}") from None
        # fastavro's check is the fast path; the walk that names every problem runs on failure
        if not fastavro_validate(value, self.schema.parsed, raise_errors=False):
            problems = validate.validation_problems(self.schema, value)
            raise DecodeError(
                f"not a valid {self.schema.name}: " + ("; ".join(problems) or "invalid")
            )
        return value  # type: ignore[no-any-return]


class JsonTopicCodec(JsonCodec):
    """Plain JSON as a Kafka topic's format: what is written is validated first.

    On a topic, an output that does not match its port's schema must be
    dead-lettered as it would be in Avro, not written for consumers to trip on.
    The fast check is fastavro's; the full reasons are built only on failure.
    """

    def __init__(self, schema: Schema, *, limits: DecodeLimits = DEFAULT_LIMITS) -> None:
        super().__init__(schema, limits=limits)
        self._fields = tuple(schema.field_names())

    def encode(self, value: dict[str, Any]) -> bytes:
        # the declared fields only, as Avro writes them: what consumers validate against
        value = {name: value[name] for name in self._fields if name in value}
        if not fastavro_validate(value, self.schema.parsed, raise_errors=False):
            raise EncodeError(describe_encode_error(self.schema, value, ValueError("invalid")))
        try:
            return super().encode(value)
        except (TypeError, ValueError) as exc:
            raise EncodeError(describe_encode_error(self.schema, value, exc)) from None


def describe_encode_error(schema: Schema, value: Any, exc: Exception) -> str:
    reasons = validate.validation_problems(schema, value)
    if reasons:
        return f"value does not match {schema.name}: " + "; ".join(reasons)
    return f"value does not match {schema.name}: {error_line(exc)}"


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class _Coercer:
    """Turn JSON-native values into what the Avro schema expects (bytes, datetimes, ...).

    Missing fields get their schema default, so a decoded record has every field,
    exactly as an Avro-decoded one would.
    """

    def __init__(self, named: dict[str, Any], limits: DecodeLimits = DEFAULT_LIMITS) -> None:
        self.named = named
        self.limits = limits

    def coerce(self, schema: Any, value: Any) -> Any:
        schema = self.named.get(schema, schema) if isinstance(schema, str) else schema
        if isinstance(schema, list):
            return self.coerce_union(schema, value)
        if isinstance(schema, str):
            return _coerce_primitive(schema, value)
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if logical and isinstance(value, str):
            return _coerce_logical(logical, value)
        if kind == "record" and isinstance(value, dict):
            return self.coerce_record(schema, value)
        if kind == "array" and isinstance(value, list):
            bounds.json_items(value, self.limits)
            return [self.coerce(schema["items"], v) for v in value]
        if kind == "map" and isinstance(value, dict):
            bounds.json_items(value, self.limits)
            return {k: self.coerce(schema["values"], v) for k, v in value.items()}
        return self.coerce(kind, value) if kind != "enum" else value

    def coerce_record(self, schema: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
        # only the declared fields, as an Avro reader keeps only its own: anything else
        # would reach the logic, and be written back out past a JSON Schema that forbids it
        out: dict[str, Any] = {}
        for field in schema["fields"]:
            name = field["name"]
            if name in value:
                out[name] = self.coerce(field["type"], value[name])
            elif "default" in field:
                out[name] = self.default(field["type"], field["default"])
        return out

    def coerce_union(self, branches: list[Any], value: Any) -> Any:
        """The first branch that the coerced value is valid for (as Avro JSON resolves)."""
        if value is None:
            return None
        for branch in branches:
            if branch == "null":
                continue
            candidate = self.coerce(branch, value)
            if not validate.datum_problems(branch, candidate, named=self.named):
                return candidate
        return value

    def default(self, schema: Any, default: Any) -> Any:
        """A field default, which Avro writes in JSON (bytes as ISO-8859-1 text)."""
        schema = self.named.get(schema, schema) if isinstance(schema, str) else schema
        if isinstance(schema, list):  # a union's default is for its first branch
            return self.default(schema[0], default) if schema else default
        kind = schema.get("type") if isinstance(schema, dict) else schema
        if kind in ("bytes", "fixed") and isinstance(default, str):
            return default.encode("latin-1")
        return self.coerce(schema, copy.deepcopy(default))


def _coerce_primitive(kind: str, value: Any) -> Any:
    if kind in ("bytes", "fixed") and isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            return value.encode()
    if kind in ("float", "double") and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _coerce_logical(logical: str, value: str) -> Any:
    try:
        if logical.startswith(("timestamp", "local-timestamp")):
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if logical == "date":
            return dt.date.fromisoformat(value)
        if logical.startswith("time-"):
            return dt.time.fromisoformat(value)
        if logical == "decimal":
            return decimal.Decimal(value)
    except (ValueError, decimal.InvalidOperation):
        return value
    return value
