"""The registry-framed codecs: ``avro-registry`` and ``json-registry`` values.

The wire format, the registry seam and its errors are in :mod:`.registry`; these
two codecs put them to work for one port's schema.

Hot-path rules, each for a reason:

* Our own schema id is resolved once (:meth:`prepare`, at start-up), so
  encoding never waits on the network; the 5-byte header is then a constant.
* A writer id is looked up once and cached with its parsed schema (or with the
  reason it cannot be read), so a record pays a registry call only the first
  time its id is seen.
* A writer schema that is our reader schema (same canonical fingerprint) is
  read without resolution; any other is resolved against the port's reader
  schema with Avro's rules, and one the reader cannot read is refused once,
  with the reasons, instead of failing record by record.
* An id the registry does not know, or a schema of the wrong type, is a
  :class:`~streamflow.schema.codecs.DecodeError` (the record is dead-lettered);
  a registry that cannot be reached is :class:`RegistryUnavailable`, which the
  runtime treats as backpressure: the batch waits and is retried.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro import schemaless_reader, schemaless_writer

from streamflow.schema import compat
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits, RecordBound
from streamflow.schema.codecs import (
    DecodeError,
    EncodeError,
    JsonTopicCodec,
    bounded,
    describe_encode_error,
    error_line,
)
from streamflow.schema.registry import (
    HEADER_LEN,
    UNKNOWN_ID_RECHECK_S,
    WIRE_MAGIC,
    Registry,
    RegistryError,
    RegistrySchema,
    UnknownSchemaId,
    UnreadableWriter,
    UnreadableWriterSchema,
    read_header,
    redacted,
    registry_text,
    schema_cost_problem,
)
from streamflow.schema.store import Schema, SchemaError, SchemaStore

__all__ = ["RegistryAvroCodec", "RegistryJsonCodec"]


class _Framed:
    """What both registry codecs share: the subject, our id, and the header it makes."""

    schema_type = "AVRO"

    def __init__(
        self,
        schema: Schema,
        registry: Registry,
        *,
        subject: str,
        register: bool,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        self.schema = schema
        self.registry = registry
        self.subject = subject
        self.register = register
        self.limits = limits
        self.schema_id: int | None = None
        self._prefix = b""
        self.last_size = 0

    def prepare(self) -> int:
        """Resolve (or register) our schema's id under the subject; once."""
        if self.schema_id is None:
            self.schema_id = self.registry.id_for(
                self.subject,
                self.schema_type,
                registry_text(self.schema, self.schema_type),
                register=self.register,
            )
            self._prefix = bytes([WIRE_MAGIC]) + self.schema_id.to_bytes(4, "big")
        return self.schema_id

    @property
    def header(self) -> bytes:
        if self.schema_id is None:
            self.prepare()
        return self._prefix

    def _lookup(self, schema_id: int) -> RegistrySchema | _Unreadable:
        """The registry's schema for an id, or why records with it cannot be read.

        An id the registry does not know is asked about again after a while (a
        registry replica may not have it yet); a schema of the wrong type is final.
        """
        try:
            found = self.registry.schema_by_id(schema_id)
        except UnknownSchemaId:
            return _Unreadable(
                f"schema id {schema_id} is not in the registry at {redacted(self.registry.url)}",
                time.monotonic() + UNKNOWN_ID_RECHECK_S,
            )
        if found.schema_type != self.schema_type:
            return _Unreadable(
                f"schema id {schema_id} is a {found.schema_type} schema; this topic's "
                f"format needs {self.schema_type}"
            )
        return found


@dataclass(frozen=True)
class _Unreadable:
    """Why records with one schema id cannot be read, until when that answer holds."""

    reason: str
    until: float = math.inf  # monotonic; inf: for the life of the codec
    writer: UnreadableWriter | None = None  # a writer schema the reader cannot read

    def expired(self) -> bool:
        return time.monotonic() >= self.until

    def error(self) -> DecodeError:
        if self.writer is not None:
            return UnreadableWriterSchema(self.reason, self.writer)
        return DecodeError(self.reason)


_ASK = _Unreadable("not asked yet", -math.inf)  # a marker: expired from the start


class RegistryAvroCodec(_Framed):
    """``avro-registry``: Avro binary after the registry header."""

    schema_type = "AVRO"

    def __init__(
        self,
        schema: Schema,
        registry: Registry,
        *,
        subject: str,
        register: bool,
        store: SchemaStore | None = None,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(schema, registry, subject=subject, register=register, limits=limits)
        self._store = store or SchemaStore(include_builtin=False)
        self._own = (self.schema.parsed, None, RecordBound(schema.raw, limits))
        # id -> (writer, reader or None, the writer's bounds), or why records with it
        # cannot be read
        self._writers: dict[int, tuple[Any, Any, RecordBound] | _Unreadable] = {}
        self._writer_schemas: dict[int, Schema] = {}  # of the ids in _writers that are readable

    def prepare(self) -> int:
        schema_id = super().prepare()
        self._writers[schema_id] = self._own
        return schema_id

    def encode(self, value: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self._prefix or self.header)
        try:
            schemaless_writer(buf, self.schema.parsed, value)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(describe_encode_error(self.schema, value, exc)) from None
        return buf.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        # the hot path: a 5-byte header, a dict hit, a tuple; everything else is the slow one
        if len(data) >= HEADER_LEN and data[0] == WIRE_MAGIC:
            schema_id = int.from_bytes(data[1:HEADER_LEN], "big")
        else:
            schema_id = read_header(data, "Avro")  # raises, saying what the bytes are
        resolved = self._writers.get(schema_id)
        if resolved.__class__ is not tuple:
            resolved = self._writer_for(schema_id, resolved)
        bound = resolved[2]
        # before fastavro builds what the bytes declare (a length check on the hot path)
        n = len(data) - HEADER_LEN
        if n > bound.walk_above:
            self.last_size = bounded(bound, data, HEADER_LEN)
        else:
            self.last_size = bound.fixed + bound.per_byte * n
        buf = io.BytesIO(data)
        buf.seek(HEADER_LEN)
        try:
            record = schemaless_reader(buf, resolved[0], resolved[1])
        except EOFError:
            raise DecodeError(
                f"cannot decode {self.schema.name} (schema id {schema_id}): the record is truncated"
            ) from None
        except Exception as exc:  # fastavro raises several types
            raise DecodeError(
                f"cannot decode {self.schema.name} (schema id {schema_id}): {error_line(exc)}"
            ) from None
        if buf.tell() != len(data):
            raise DecodeError(
                f"{len(data) - buf.tell()} trailing bytes after the {self.schema.name} record "
                f"(schema id {schema_id})"
            )
        if not isinstance(record, dict):  # pragma: no cover - named schemas are records
            raise DecodeError(f"{self.schema.name} did not decode to a record")
        return record

    def writer_schema(self, schema_id: int) -> Schema:
        """The schema that wrote records with this id, looked up and checked as :meth:`decode` does.

        For a columnar codec of the same port: it shares this codec's lookups and
        cache. Raises :class:`DecodeError` (with the reason :meth:`decode` gives) where
        records with the id cannot be read, and :class:`RegistryUnavailable` as decode does.
        """
        self._writer_for(schema_id, self._writers.get(schema_id))
        return self._writer_schemas.get(schema_id, self.schema)  # our own id, after prepare()

    def _writer_for(
        self, schema_id: int, cached: tuple[Any, Any, RecordBound] | _Unreadable | None
    ) -> tuple[Any, Any, RecordBound]:
        """The (writer, reader) of an id not known yet, or whose bad answer has expired."""
        if cached is None or (isinstance(cached, _Unreadable) and cached.expired()):
            cached = self._writers[schema_id] = self._resolve(schema_id)
        if isinstance(cached, _Unreadable):
            raise cached.error()
        return cached

    def _resolve(self, schema_id: int) -> tuple[Any, Any, RecordBound] | _Unreadable:
        """The writer schema of an id, parsed and checked against ours; or why not."""
        found = self._lookup(schema_id)
        if isinstance(found, _Unreadable):
            return found
        if found.has_references:
            return _Unreadable(
                f"schema id {schema_id} uses schema references, which streamflow does not "
                "resolve yet; register the schema self-contained"
            )
        too_big = schema_cost_problem(found.text)
        if too_big:
            return _Unreadable(f"schema id {schema_id} is refused: {too_big}")
        try:
            writer = self._store.version_from(json.loads(found.text))
            bound = RecordBound(writer.raw, self.limits)
            same = writer.fingerprint == self.schema.fingerprint
            problems = (
                [] if same else compat.compatibility_problems(reader=self.schema, writer=writer)
            )
        except (ValueError, SchemaError) as exc:
            return _Unreadable(f"schema id {schema_id} is not a usable Avro schema: {exc}")
        except RecursionError:
            return _Unreadable(f"schema id {schema_id} is nested too deeply to read")
        if problems:
            version, where = self._version_of(schema_id)
            unreadable = UnreadableWriter(
                self.subject, version, schema_id, writer.name, tuple(problems)
            )
            return _Unreadable(
                f"a new writer schema ({writer.name}, {where}), which "
                f"{self.schema.name} cannot read: " + "; ".join(problems),
                writer=unreadable,
            )
        self._writer_schemas[schema_id] = writer
        if same:
            return self._own
        return (fastavro.parse_schema(writer.raw), self.schema.parsed, bound)

    def _version_of(self, schema_id: int) -> tuple[int | None, str]:
        """Which version of our subject a writer's schema id is, and in words (once per id).

        What a dead letter says, so that a burst of them reads as what it is: some
        producer registered a schema this consumer cannot read, and which one.
        """
        where = f"schema id {schema_id}"
        try:
            versions = self.registry.versions(self.subject)
        except RegistryError:
            return None, where
        for found in versions:
            if found.schema_id == schema_id and found.version is not None:
                return found.version, f"version {found.version} of subject {self.subject}, {where}"
        return None, f"{where}, not a version of subject {self.subject}"


class RegistryJsonCodec(_Framed):
    """``json-registry``: a JSON document after the registry header.

    The registry holds a JSON Schema made from the port's Avro schema, so
    consumers written with other clients validate what we write; what we read
    is checked against the port's Avro schema, as a plain JSON topic is.
    """

    schema_type = "JSON"

    def __init__(
        self,
        schema: Schema,
        registry: Registry,
        *,
        subject: str,
        register: bool,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(schema, registry, subject=subject, register=register, limits=limits)
        self._json = JsonTopicCodec(schema, limits=limits)
        self._known: dict[int, _Unreadable | None] = {}  # id -> None when readable, else why not

    def encode(self, value: dict[str, Any]) -> bytes:
        return (self._prefix or self.header) + self._json.encode(value)

    def decode(self, data: bytes) -> dict[str, Any]:
        schema_id = read_header(data, "JSON")
        known = self._known.get(schema_id, _ASK)
        if known is not None and known.expired():
            found = self._lookup(schema_id)
            known = self._known[schema_id] = found if isinstance(found, _Unreadable) else None
        if known is not None:
            raise DecodeError(known.reason)
        record = self._json.decode(data[HEADER_LEN:])
        self.last_size = self._json.last_size
        return record
