"""The schema registry seam, on confluent-kafka's Schema Registry client.

The client caches schemas by id and ids by (subject, schema), so after the
first record of each writer schema the hot path makes no network call. Its
errors are sorted into the codecs' two kinds: an answer that means "no such
schema" (:class:`~streamflow.schema.registry.UnknownSchemaId`, the record is
dead-lettered) and anything that means "ask again later"
(:class:`~streamflow.schema.registry.RegistryUnavailable`, backpressure).

confluent-kafka's registry module is the ``registry`` extra, imported on first
use so applications without registry topics never need it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import fastavro
import fastavro.schema

from streamflow.schema.fingerprint import fingerprint64
from streamflow.schema.registry import (
    RegistryRefused,
    RegistrySchema,
    RegistryUnavailable,
    SchemaNotRegistered,
    UnknownSchemaId,
)

__all__ = ["REGISTRY_ENV", "ConfluentRegistry", "connect"]

REGISTRY_ENV = "STREAMFLOW_SCHEMA_REGISTRY_URL"
_NOT_FOUND = (40401, 40402, 40403)  # subject, version, schema not found
_CLIENT_KEYS = ("basic.auth.user.info", "basic.auth.credentials.source", "ssl.ca.location")


class ConfluentRegistry:
    """:class:`streamflow.schema.registry.Registry` over ``SchemaRegistryClient``."""

    def __init__(self, url: str, *, config: Mapping[str, str] | None = None) -> None:
        try:
            from confluent_kafka.schema_registry import SchemaRegistryClient
        except ImportError as exc:
            raise RuntimeError(
                "registry topic formats need confluent-kafka's schema registry client: "
                "pip install 'streamflow[registry]'"
                f" ({exc})"
            ) from None
        self.url = url.rstrip("/")
        conf: dict[str, Any] = {"url": self.url, "timeout": 10, "max.retries": 1}
        conf.update({k: v for k, v in (config or {}).items() if k in _CLIENT_KEYS})
        self._client = SchemaRegistryClient(conf)

    def schema_by_id(self, schema_id: int) -> RegistrySchema:
        with _errors(f"schema id {schema_id}"):
            found = self._client.get_schema(schema_id)
        return RegistrySchema(
            schema_id=schema_id,
            schema_type=found.schema_type or "AVRO",
            text=found.schema_str or "",
            has_references=bool(found.references),
        )

    def id_for(self, subject: str, schema_type: str, text: str, *, register: bool) -> int:
        schema = self._schema(schema_type, text)
        if register:
            with _errors(f"registering under {subject}"):
                return int(self._client.register_schema(subject, schema))
        try:
            with _errors(f"looking up under {subject}"):
                return int(self._client.lookup_schema(subject, schema).schema_id or 0)
        except UnknownSchemaId:
            found = self._equivalent(subject, schema_type, text)
            if found is not None:
                return found
            raise SchemaNotRegistered(
                f"the port's schema is not registered under subject {subject!r} at {self.url}; "
                "register it (the subject's owner, or a CI job), or set `register: auto` "
                "on the topic to let streamflow register it"
            ) from None

    def _equivalent(self, subject: str, schema_type: str, text: str) -> int | None:
        """The id of a version of ``subject`` that is our schema, written differently.

        Some registries' lookups compare texts (Apicurio's does): a schema
        registered as its owner wrote it (a namespace and short names, other key
        order) is still ours, and a producer that may not register must find it.
        """
        wanted = _comparable(schema_type, text)
        try:
            with _errors(f"the versions of {subject}"):
                versions = self._client.get_versions(subject)
        except UnknownSchemaId:
            return None
        for version in reversed(versions):
            with _errors(f"version {version} of {subject}"):
                found = self._client.get_version(subject, version)
            kind = found.schema.schema_type or "AVRO"
            if kind == schema_type and _comparable(kind, found.schema.schema_str or "") == wanted:
                return int(found.schema_id or 0)
        return None

    def latest(self, subject: str) -> RegistrySchema | None:
        try:
            with _errors(f"the latest version of {subject}"):
                found = self._client.get_latest_version(subject)
        except UnknownSchemaId:
            return None
        return RegistrySchema(
            schema_id=int(found.schema_id or 0),
            schema_type=found.schema.schema_type or "AVRO",
            text=found.schema.schema_str or "",
            has_references=bool(found.schema.references),
            version=found.version,
        )

    def compatible(self, subject: str, schema_type: str, text: str) -> list[str]:
        """Why the subject's compatibility rule refuses this schema; empty if it accepts."""
        if self.latest(subject) is None:
            return []
        with _errors(f"checking compatibility with {subject}"):
            answer = self._client.test_compatibility(
                subject, self._schema(schema_type, text), verbose=True
            )
        if answer is True:
            return []
        messages = getattr(answer, "messages", None) or []
        return [str(m) for m in messages] or [
            f"the registry's compatibility rule for {subject!r} refuses it"
        ]

    @staticmethod
    def _schema(schema_type: str, text: str) -> Any:
        from confluent_kafka.schema_registry import Schema

        return Schema(text, schema_type)


def connect(url: str | None, *, config: Mapping[str, str] | None = None) -> ConfluentRegistry:
    """The registry at ``url`` (or ``$STREAMFLOW_SCHEMA_REGISTRY_URL``)."""
    chosen = url or os.environ.get(REGISTRY_ENV)
    if not chosen:
        raise RuntimeError(
            "this application has registry topics but no schema registry is configured: "
            f"set kafka.schema_registry in the blueprint, --registry, or ${REGISTRY_ENV}"
        )
    return ConfluentRegistry(chosen, config=config)


def _comparable(schema_type: str, text: str) -> Any:
    """A schema text in a form where equal schemas are equal.

    Avro: the fingerprint of its Parsing Canonical Form (full names, no docs or
    aliases, attributes in one order), the form the specification defines for this.
    """
    try:
        doc = json.loads(text)
        if schema_type == "AVRO":
            return fingerprint64(fastavro.parse_schema(doc, _write_hint=False, _force=True))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException):
        return text
    return doc


@contextmanager
def _errors(what: str) -> Iterator[None]:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        yield
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404 or exc.error_code in _NOT_FOUND:
            raise UnknownSchemaId(f"{what}: {exc.error_message}") from None
        if exc.http_status_code >= 500 or exc.http_status_code in (408, 429):
            raise RegistryUnavailable(f"schema registry: {what}: {exc.error_message}") from None
        raise RegistryRefused(f"schema registry refused {what}: {exc.error_message}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise RegistryUnavailable(f"schema registry: {what}: {exc}") from None
    except Exception as exc:  # httpx's transport errors, timeouts
        if type(exc).__module__.startswith("httpx"):
            raise RegistryUnavailable(f"schema registry: {what}: {exc}") from None
        raise
