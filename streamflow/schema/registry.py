"""Codecs for the Confluent Schema Registry wire format, over a registry seam.

A registry-framed value is byte ``0``, the writer schema's 4-byte big-endian id,
then the body: Avro binary (``avro-registry``) or a UTF-8 JSON document
(``json-registry``). This module is the wire format only; the registry itself
is behind the small :class:`Registry` protocol (the runtime plugs in
confluent-kafka's cached client, tests may plug in anything), so this layer
stays free of network code.

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
from dataclasses import dataclass
from typing import Any, Protocol

import fastavro
from fastavro import schemaless_reader, schemaless_writer

from streamflow.schema import compat, jsonschema
from streamflow.schema.codecs import DecodeError, EncodeError, JsonTopicCodec, describe_encode_error
from streamflow.schema.store import Schema, SchemaError, SchemaStore

__all__ = [
    "WIRE_MAGIC",
    "Registry",
    "RegistryAvroCodec",
    "RegistryError",
    "RegistryJsonCodec",
    "RegistryRefused",
    "RegistrySchema",
    "RegistryUnavailable",
    "SchemaNotRegistered",
    "UnknownSchemaId",
    "registry_text",
    "schema_id_of",
]

WIRE_MAGIC = 0
_HEADER_LEN = 5


class RegistryError(Exception):
    """The registry answered, and the answer means we cannot go on as asked."""


class RegistryUnavailable(Exception):
    """The registry could not be reached or failed; a retry later may work."""


class RegistryRefused(RegistryError):
    """A 4xx answer other than not-found: an incompatible or invalid schema, bad auth."""


class UnknownSchemaId(RegistryError):
    """The registry has no schema with this id."""


class SchemaNotRegistered(RegistryError):
    """Our schema is not under the subject and we may not register it."""


@dataclass(frozen=True)
class RegistrySchema:
    schema_id: int
    schema_type: str  # AVRO, JSON or PROTOBUF
    text: str
    has_references: bool = False
    version: int | None = None


class Registry(Protocol):
    """What the codecs and the verifier need of a schema registry."""

    url: str

    def schema_by_id(self, schema_id: int) -> RegistrySchema: ...

    def id_for(self, subject: str, schema_type: str, text: str, *, register: bool) -> int: ...

    def latest(self, subject: str) -> RegistrySchema | None: ...

    def compatible(self, subject: str, schema_type: str, text: str) -> list[str]: ...


def registry_text(schema: Schema, schema_type: str) -> str:
    """What a port's schema is registered as: its Avro schema, or the JSON Schema made from it."""
    if schema_type == "JSON":
        return json.dumps(jsonschema.from_avro(schema), separators=(",", ":"))
    return json.dumps(schema.raw, separators=(",", ":"))


def schema_id_of(data: bytes | None) -> int | None:
    """The schema id of a registry-framed value, or None if it is not one."""
    if data is None or len(data) < _HEADER_LEN or data[0] != WIRE_MAGIC:
        return None
    return int.from_bytes(data[1:_HEADER_LEN], "big")


def _header(data: bytes, name: str) -> int:
    if len(data) < _HEADER_LEN or data[0] != WIRE_MAGIC:
        shown = data[:_HEADER_LEN].hex(" ") or "empty"
        raise DecodeError(
            f"not in the schema registry wire format (expected byte 00 and a 4-byte schema id "
            f"before the {name} body, got {shown})"
        )
    return int.from_bytes(data[1:_HEADER_LEN], "big")


class _Framed:
    """What both registry codecs share: the subject, our id, and the header it makes."""

    schema_type = "AVRO"

    def __init__(self, schema: Schema, registry: Registry, *, subject: str, register: bool) -> None:
        self.schema = schema
        self.registry = registry
        self.subject = subject
        self.register = register
        self.schema_id: int | None = None
        self._prefix = b""

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

    def _lookup(self, schema_id: int) -> RegistrySchema:
        try:
            found = self.registry.schema_by_id(schema_id)
        except UnknownSchemaId:
            raise DecodeError(
                f"schema id {schema_id} is not in the registry at {self.registry.url}"
            ) from None
        if found.schema_type != self.schema_type:
            raise DecodeError(
                f"schema id {schema_id} is a {found.schema_type} schema; this topic's "
                f"format needs {self.schema_type}"
            )
        return found


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
    ) -> None:
        super().__init__(schema, registry, subject=subject, register=register)
        self._store = store or SchemaStore(include_builtin=False)
        # id -> (writer, reader or None), or the DecodeError message for an unreadable one
        self._writers: dict[int, tuple[Any, Any] | str] = {}

    def prepare(self) -> int:
        schema_id = super().prepare()
        self._writers[schema_id] = (self.schema.parsed, None)
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
        schema_id = _header(data, "Avro")
        resolved = self._writers.get(schema_id)
        if resolved is None:
            resolved = self._writers[schema_id] = self._resolve(schema_id)
        if isinstance(resolved, str):
            raise DecodeError(resolved)
        buf = io.BytesIO(data)
        buf.seek(_HEADER_LEN)
        try:
            record = schemaless_reader(buf, resolved[0], resolved[1])
        except EOFError:
            raise DecodeError(
                f"cannot decode {self.schema.name} (schema id {schema_id}): the record is truncated"
            ) from None
        except Exception as exc:  # fastavro raises several types
            raise DecodeError(
                f"cannot decode {self.schema.name} (schema id {schema_id}): "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if buf.tell() != len(data):
            raise DecodeError(
                f"{len(data) - buf.tell()} trailing bytes after the {self.schema.name} record "
                f"(schema id {schema_id})"
            )
        if not isinstance(record, dict):  # pragma: no cover - named schemas are records
            raise DecodeError(f"{self.schema.name} did not decode to a record")
        return record

    def _resolve(self, schema_id: int) -> tuple[Any, Any] | str:
        """The writer schema of an id, parsed and checked against ours; or why not."""
        try:
            found = self._lookup(schema_id)
        except DecodeError as exc:
            return str(exc)
        if found.has_references:
            return (
                f"schema id {schema_id} uses schema references, which streamflow does not "
                "resolve yet; register the schema self-contained"
            )
        try:
            writer = self._store.version_from(json.loads(found.text))
        except (ValueError, SchemaError) as exc:
            return f"schema id {schema_id} is not a usable Avro schema: {exc}"
        if writer.fingerprint == self.schema.fingerprint:
            return (self.schema.parsed, None)
        problems = compat.compatibility_problems(reader=self.schema, writer=writer)
        if problems:
            return (
                f"{self.schema.name} cannot read records written with schema id {schema_id} "
                f"({writer.name}): " + "; ".join(problems)
            )
        return (fastavro.parse_schema(writer.raw), self.schema.parsed)


class RegistryJsonCodec(_Framed):
    """``json-registry``: a JSON document after the registry header.

    The registry holds a JSON Schema made from the port's Avro schema, so
    consumers written with other clients validate what we write; what we read
    is checked against the port's Avro schema, as a plain JSON topic is.
    """

    schema_type = "JSON"

    def __init__(self, schema: Schema, registry: Registry, *, subject: str, register: bool) -> None:
        super().__init__(schema, registry, subject=subject, register=register)
        self._json = JsonTopicCodec(schema)
        self._known: dict[int, str | None] = {}  # id -> None when readable, else why not

    def encode(self, value: dict[str, Any]) -> bytes:
        return (self._prefix or self.header) + self._json.encode(value)

    def decode(self, data: bytes) -> dict[str, Any]:
        schema_id = _header(data, "JSON")
        if schema_id not in self._known:
            try:
                self._lookup(schema_id)
                self._known[schema_id] = None
            except DecodeError as exc:
                self._known[schema_id] = str(exc)
        reason = self._known[schema_id]
        if reason is not None:
            raise DecodeError(reason)
        return self._json.decode(data[_HEADER_LEN:])
