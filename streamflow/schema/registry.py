"""Codecs for the Confluent Schema Registry wire format, over a registry seam.

A registry-framed value is byte ``0``, the writer schema's 4-byte big-endian id,
then the body: Avro binary (``avro-registry``) or a UTF-8 JSON document
(``json-registry``). This module is the wire format only; the registry itself
is behind the small :class:`Registry` protocol (the runtime plugs in
confluent-kafka's cached client, tests may plug in anything), so this layer
stays free of network code.

The codecs themselves (what the runtime encodes and decodes with) are in
:mod:`streamflow.schema.registry_codecs`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from streamflow.schema import jsonschema
from streamflow.schema.codecs import (
    DecodeError,
)
from streamflow.schema.store import Schema

__all__ = [
    "HEADER_LEN",
    "UNKNOWN_ID_RECHECK_S",
    "USER_INFO_ENV",
    "WIRE_MAGIC",
    "NotFound",
    "Registry",
    "RegistryError",
    "RegistryRefused",
    "RegistrySchema",
    "RegistryUnavailable",
    "SchemaNotRegistered",
    "UnknownSchemaId",
    "UnreadableWriter",
    "UnreadableWriterSchema",
    "has_credentials",
    "read_header",
    "redacted",
    "registry_text",
    "schema_cost_problem",
    "schema_id_of",
    "url_problem",
]

WIRE_MAGIC = 0
HEADER_LEN = 5
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
    if data is None or len(data) < HEADER_LEN or data[0] != WIRE_MAGIC:
        return None
    return int.from_bytes(data[1:HEADER_LEN], "big")


def read_header(data: bytes, name: str) -> int:
    if len(data) < HEADER_LEN or data[0] != WIRE_MAGIC:
        shown = data[:HEADER_LEN].hex(" ") or "empty"
        raise DecodeError(
            f"not in the schema registry wire format (expected byte 00 and a 4-byte schema id "
            f"before the {name} body, got {shown})"
        )
    return int.from_bytes(data[1:HEADER_LEN], "big")


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
