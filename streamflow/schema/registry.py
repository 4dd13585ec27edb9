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
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import fastavro
from fastavro import schemaless_reader, schemaless_writer

from streamflow.schema import compat, jsonschema
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits, RecordBound
from streamflow.schema.codecs import (
    DecodeError,
    EncodeError,
    JsonTopicCodec,
    bounded,
    describe_encode_error,
    error_line,
)
from streamflow.schema.store import Schema, SchemaError, SchemaStore

__all__ = [
    "USER_INFO_ENV",
    "WIRE_MAGIC",
    "NotFound",
    "Registry",
    "RegistryAvroCodec",
    "RegistryError",
    "RegistryJsonCodec",
    "RegistryRefused",
    "RegistrySchema",
    "RegistryUnavailable",
    "SchemaNotRegistered",
    "UnknownSchemaId",
    "UnreadableWriter",
    "UnreadableWriterSchema",
    "has_credentials",
    "redacted",
    "registry_text",
    "schema_id_of",
    "url_problem",
]

WIRE_MAGIC = 0
_HEADER_LEN = 5
UNKNOWN_ID_RECHECK_S = 30.0  # an unknown id's dead letters may stop when a registry catches up


class RegistryError(Exception):
    """The registry answered, and the answer means we cannot go on as asked."""


class RegistryUnavailable(Exception):
    """The registry could not be reached or failed; a retry later may work."""


class RegistryRefused(RegistryError):
    """A 4xx answer other than not-found: an incompatible or invalid schema, bad auth."""


class NotFound(RegistryError):
    """The registry says it has no such subject, version or schema."""


class UnknownSchemaId(NotFound):
    """The registry has no schema with this id."""


class SchemaNotRegistered(RegistryError):
    """Our schema is not under the subject and we may not register it."""


@dataclass(frozen=True)
class UnreadableWriter:
    """A writer schema a port's reader cannot read: where it is registered, and why not.

    ``version`` is None when the id is not a version of the port's subject (a
    producer wrote under another subject), or the registry could not say.
    """

    subject: str
    version: int | None
    schema_id: int
    writer: str  # the writer schema's full name
    problems: tuple[str, ...]


class UnreadableWriterSchema(DecodeError):
    """A record written with a schema the port cannot read; ``writer`` says which and why.

    A :class:`~streamflow.schema.codecs.DecodeError` like any other (the record is
    dead-lettered), told apart so a burst of them can be counted by writer schema.
    """

    def __init__(self, message: str, writer: UnreadableWriter) -> None:
        super().__init__(message)
        self.writer = writer


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

    def versions(self, subject: str) -> list[RegistrySchema]: ...

    def compatible(self, subject: str, schema_type: str, text: str) -> list[str]: ...

    def compatibility(self, subject: str) -> str | None:
        """The subject's compatibility level (the global one when it has none of its own)."""
        ...

    def set_compatibility(self, subject: str, level: str) -> None: ...


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a registry's base URL, if it cannot (the URL redacted in it)."""
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return (
            f"schema registry URL {redacted(url)!r} must be http:// or https:// with a host, "
            "e.g. http://registry:8081 (for Apicurio: http://host:8080/apis/ccompat/v7)"
        )
    if has_credentials(url):
        return (
            f"schema registry URL {redacted(url)!r} holds credentials (user:password@): a URL "
            "is copied into the application's spec, its ConfigMap, logs and error messages. "
            f"Give them in ${USER_INFO_ENV} (user:password) instead, or on Kubernetes as "
            "SCHEMA_REGISTRY_USER_INFO in the application's Kafka Secret"
        )
    return None


#: where a registry's basic-auth credentials go (never in its URL)
USER_INFO_ENV = "STREAMFLOW_SCHEMA_REGISTRY_USER_INFO"


def has_credentials(url: str) -> bool:
    """Whether a URL carries user-info (``user:password@host``)."""
    try:
        parsed = urlsplit(url)
    except ValueError:
        return "@" in url
    return "@" in parsed.netloc


def redacted(url: str) -> str:
    """``url`` without its user-info: what any message may show of it."""
    try:
        parsed = urlsplit(url)
    except ValueError:
        return "<an unparseable URL>"
    if "@" not in parsed.netloc:
        return url
    return parsed._replace(netloc="***@" + parsed.netloc.rpartition("@")[2]).geturl()


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


#: What a writer schema from the registry may cost to read: its text, how deep its
#: JSON nests, how many JSON values it holds. A schema is parsed, normalised and
#: compiled once per id; past these (a 300,000-field schema took 7.4 s and 566 MiB,
#: 900 nested records overflowed the stack) its records are dead-lettered instead.
MAX_SCHEMA_CHARS = 1 << 20
MAX_SCHEMA_DEPTH = 200  # brackets: a record in a record is three ({ [ {)
MAX_SCHEMA_VALUES = 100_000
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def schema_cost_problem(text: str) -> str | None:
    """Why a registry schema's text is too costly to read, if it is; without parsing it."""
    if len(text) > MAX_SCHEMA_CHARS:
        return f"its text is {len(text):,} characters, more than {MAX_SCHEMA_CHARS:,}"
    bare = _STRINGS.sub('""', text)  # what is outside strings: the structure
    depth = deepest = 0
    for bracket in _BRACKETS.findall(bare):  # no recursion, no parse
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_SCHEMA_DEPTH:
        return f"it nests {deepest:,} levels deep, more than {MAX_SCHEMA_DEPTH:,}"
    values = sum(bare.count(c) for c in ",[{")
    if values > MAX_SCHEMA_VALUES:
        return f"it holds about {values:,} JSON values, more than {MAX_SCHEMA_VALUES:,}"
    return None


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
        if len(data) >= _HEADER_LEN and data[0] == WIRE_MAGIC:
            schema_id = int.from_bytes(data[1:_HEADER_LEN], "big")
        else:
            schema_id = _header(data, "Avro")  # raises, saying what the bytes are
        resolved = self._writers.get(schema_id)
        if resolved.__class__ is not tuple:
            resolved = self._writer_for(schema_id, resolved)
        bound = resolved[2]
        # before fastavro builds what the bytes declare (a length check on the hot path)
        n = len(data) - _HEADER_LEN
        if n > bound.walk_above:
            self.last_size = bounded(bound, data, _HEADER_LEN)
        else:
            self.last_size = bound.fixed + bound.per_byte * n
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
        if same:
            return self._own
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
        schema_id = _header(data, "JSON")
        known = self._known.get(schema_id, _ASK)
        if known is not None and known.expired():
            found = self._lookup(schema_id)
            known = self._known[schema_id] = found if isinstance(found, _Unreadable) else None
        if known is not None:
            raise DecodeError(known.reason)
        record = self._json.decode(data[_HEADER_LEN:])
        self.last_size = self._json.last_size
        return record
