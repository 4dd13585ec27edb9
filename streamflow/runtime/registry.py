"""The schema registry seam, on confluent-kafka's Schema Registry client.

The client caches schemas by id and ids by (subject, schema), so after the
first record of each writer schema the hot path makes no network call. Its
errors are sorted into the codecs' two kinds: an answer that means "no such
schema" (:class:`~streamflow.schema.registry.UnknownSchemaId`, the record is
dead-lettered) and anything that means "ask again later"
(:class:`~streamflow.schema.registry.RegistryUnavailable`, backpressure).

confluent-kafka's registry module is the ``registry`` extra, imported on first
use so applications without registry topics never need it. Credentials never
sit in a blueprint: ``$STREAMFLOW_SCHEMA_REGISTRY_USER_INFO`` (``user:password``),
or the key ``SCHEMA_REGISTRY_USER_INFO`` of the application's Kafka Secret on
Kubernetes, is sent as basic auth.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

import fastavro
import fastavro.schema

if TYPE_CHECKING:
    import httpx

from streamflow.schema import registry as registry_schema
from streamflow.schema.registry import (
    NotFound,
    RegistryError,
    RegistryRefused,
    RegistrySchema,
    RegistryUnavailable,
    SchemaNotRegistered,
    UnknownSchemaId,
    redacted,
    url_problem,
)

__all__ = [
    "REGISTRY_ENV",
    "USER_INFO_ENV",
    "ConfluentRegistry",
    "RegistryConfigError",
    "connect",
]

REGISTRY_ENV = "STREAMFLOW_SCHEMA_REGISTRY_URL"
USER_INFO_ENV = registry_schema.USER_INFO_ENV
# the same, from the application's Kafka Secret on Kubernetes (its keys get STREAMFLOW_KAFKA_)
SECRET_USER_INFO_ENV = "STREAMFLOW_KAFKA_SCHEMA_REGISTRY_USER_INFO"
_SCHEMA_NOT_FOUND = 40403
_SUBJECT_OR_VERSION_NOT_FOUND = (40401, 40402)
_TIMEOUT_S = 5.0


class RegistryConfigError(RuntimeError):
    """The registry cannot be used as configured: a bad URL, or the client is not installed."""


class ConfluentRegistry:
    """:class:`streamflow.schema.registry.Registry` over ``SchemaRegistryClient``."""

    def __init__(self, url: str, *, environ: Mapping[str, str] | None = None) -> None:
        try:
            from confluent_kafka.schema_registry import SchemaRegistryClient
        except ImportError as exc:
            raise RegistryConfigError(
                "registry topic formats need confluent-kafka's schema registry client: "
                f"pip install 'streamflow[registry]' ({exc})"
            ) from None
        problem = url_problem(url)
        if problem:
            raise RegistryConfigError(problem)
        self.url = url.rstrip("/")
        conf: dict[str, Any] = {"url": self.url, "timeout": _TIMEOUT_S, "max.retries": 1}
        env = os.environ if environ is None else environ
        user_info = env.get(USER_INFO_ENV) or env.get(SECRET_USER_INFO_ENV)
        if user_info:
            conf["basic.auth.user.info"] = user_info
        user, _, password = (user_info or "").partition(":")
        self._auth = (user, password) if user_info else None
        try:
            self._client = SchemaRegistryClient(conf)
        except ValueError as exc:
            raise RegistryConfigError(f"schema registry {redacted(url)!r}: {exc}") from None

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
        if register:
            try:
                with _errors(f"registering under {subject}"):
                    return int(
                        self._client.register_schema(subject, self._schema(schema_type, text))
                    )
            except (RegistryRefused, RegistryUnavailable):
                # Replicas starting together register a subject's first version at the same
                # moment, and the registry may answer all but one with an error (Apicurio:
                # 409 "already exists", or 500 from its store's unique key). The schema is
                # there now, under the id to use; an error that stays is raised as it was.
                try:
                    found = self._registered(subject, schema_type, text)
                except (RegistryError, RegistryUnavailable):
                    found = None
                if found is None:
                    raise
                return found
        found = self._registered(subject, schema_type, text)
        if found is None:
            raise SchemaNotRegistered(
                f"the port's schema is not registered under subject {subject!r} at "
                f"{redacted(self.url)}; "
                "register it (the subject's owner, or a CI job), or set `register: auto` "
                "on the topic to let streamflow register it"
            )
        return found

    def _registered(self, subject: str, schema_type: str, text: str) -> int | None:
        """The id of our schema under ``subject``, if it is registered there."""
        try:
            with _errors(f"looking up under {subject}"):
                schema = self._schema(schema_type, text)
                return int(self._client.lookup_schema(subject, schema).schema_id or 0)
        except NotFound:
            return self._equivalent(subject, schema_type, text)

    def _equivalent(self, subject: str, schema_type: str, text: str) -> int | None:
        """The id of a version of ``subject`` that is our schema, written differently.

        Some registries' lookups compare texts (Apicurio's does): a schema
        registered as its owner wrote it (a namespace and short names, other key
        order) is still ours, and a producer that may not register must find it.
        """
        wanted = _comparable(schema_type, text)
        for found in reversed(self.versions(subject)):
            if (
                found.schema_type == schema_type
                and _comparable(found.schema_type, found.text) == wanted
            ):
                return found.schema_id
        return None

    def latest(self, subject: str) -> RegistrySchema | None:
        try:
            with _errors(f"the latest version of {subject}"):
                found = self._client.get_latest_version(subject)
        except NotFound:
            return None
        return RegistrySchema(
            schema_id=int(found.schema_id or 0),
            schema_type=found.schema.schema_type or "AVRO",
            text=found.schema.schema_str or "",
            has_references=bool(found.schema.references),
            version=found.version,
        )

    def versions(self, subject: str) -> list[RegistrySchema]:
        """Every version of ``subject``, oldest first; empty when there is no such subject."""
        try:
            with _errors(f"the versions of {subject}"):
                numbers = self._client.get_versions(subject)
        except NotFound:
            return []
        out = []
        for number in numbers:
            with _errors(f"version {number} of {subject}"):
                found = self._client.get_version(subject, number)
            out.append(
                RegistrySchema(
                    schema_id=int(found.schema_id or 0),
                    schema_type=found.schema.schema_type or "AVRO",
                    text=found.schema.schema_str or "",
                    has_references=bool(found.schema.references),
                    version=found.version,
                )
            )
        return out

    def compatible(self, subject: str, schema_type: str, text: str) -> list[str]:
        """Why the subject's compatibility rule refuses this schema; empty if it accepts.

        Asked verbosely (the client's own call keeps only the yes or no), so a
        refusal says which field; a subject with no versions accepts anything.
        """
        if self.latest(subject) is None:
            return []
        what = f"checking compatibility with {subject}"
        body: dict[str, Any] = {"schema": text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        import httpx  # on first use: most replicas never ask a registry

        try:
            answer = httpx.post(
                f"{self.url}/compatibility/subjects/{quote(subject, safe='')}/versions/latest",
                params={"verbose": "true"},
                json=body,
                headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
                auth=self._auth,
                timeout=_TIMEOUT_S,
            )
        except httpx.HTTPError as exc:
            raise RegistryUnavailable(f"schema registry: {what}: {exc}") from None
        if answer.status_code != 200:
            _raise_for(answer.status_code, _error_code(answer), answer.text[:200], what)
        found = answer.json()
        if found.get("is_compatible", False):
            return []
        reasons = found.get("messages") or ([found["reason"]] if found.get("reason") else [])
        return [str(r) for r in reasons] or [
            f"the registry's compatibility rule for {subject!r} refuses it"
        ]

    def compatibility(self, subject: str) -> str | None:
        """The level that applies to ``subject``: its own, else the registry's global one.

        Confluent answers a subject without a level of its own with the global one
        when asked ``defaultToGlobal``; a registry that knows no such subject
        (Apicurio, before the first version) answers not-found: the global one applies.
        """
        import httpx  # on first use: most replicas never ask a registry

        quoted = quote(subject, safe="")
        for path, params in ((f"config/{quoted}", {"defaultToGlobal": "true"}), ("config", {})):
            what = f"the compatibility level of {subject}"
            try:
                answer = httpx.get(
                    f"{self.url}/{path}", params=params, auth=self._auth, timeout=_TIMEOUT_S
                )
            except httpx.HTTPError as exc:
                raise RegistryUnavailable(f"schema registry: {what}: {exc}") from None
            if answer.status_code == 404 and path != "config":
                continue
            if answer.status_code != 200:
                _raise_for(answer.status_code, _error_code(answer), answer.text[:200], what)
            try:
                level = answer.json().get("compatibilityLevel")
            except (ValueError, AttributeError):
                return None
            return str(level).upper() if level else None
        return None  # pragma: no cover - the loop returns or raises

    def set_compatibility(self, subject: str, level: str) -> None:
        with _errors(f"setting the compatibility level of {subject} to {level}"):
            self._client.set_compatibility(subject_name=subject, level=level)

    @staticmethod
    def _schema(schema_type: str, text: str) -> Any:
        from confluent_kafka.schema_registry import Schema

        return Schema(text, schema_type)


def connect(url: str | None) -> ConfluentRegistry:
    """The registry at ``url`` (or ``$STREAMFLOW_SCHEMA_REGISTRY_URL``)."""
    chosen = url or os.environ.get(REGISTRY_ENV)
    if not chosen:
        raise RegistryConfigError(
            "this application has registry topics but no schema registry is configured: "
            f"set kafka.schema_registry in the blueprint, --registry, or ${REGISTRY_ENV}"
        )
    return ConfluentRegistry(chosen)


def _comparable(schema_type: str, text: str) -> Any:
    """A schema text in a form where equal schemas are equal.

    Avro: fastavro's parsed form (full names) without docs, as sorted JSON. Not
    the Parsing Canonical Form: that drops logical types and defaults, and a
    ``long`` must not pass for a ``timestamp-millis``.
    """
    try:
        doc = json.loads(text)
        if schema_type == "AVRO":
            parsed = fastavro.parse_schema(doc, _write_hint=False, _force=True)
            return json.dumps(_without_docs(parsed), sort_keys=True)
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException):
        return text
    return doc


def _without_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_docs(v) for k, v in node.items() if k != "doc"}
    if isinstance(node, list):
        return [_without_docs(v) for v in node]
    return node


@contextmanager
def _errors(what: str) -> Iterator[None]:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        yield
    except SchemaRegistryError as exc:
        _raise_for(exc.http_status_code, exc.error_code, exc.error_message, what)
    except (OSError, json.JSONDecodeError) as exc:
        raise RegistryUnavailable(f"schema registry: {what}: {exc}") from None
    except Exception as exc:  # httpx's (httpx2's) transport errors and timeouts
        if type(exc).__module__.startswith("httpx"):
            raise RegistryUnavailable(f"schema registry: {what}: {exc}") from None
        raise


def _raise_for(status: int, code: int | None, message: str, what: str) -> NoReturn:
    """The registry's error answer as the exception the codecs and verifier act on.

    Only the registry's own not-found codes mean "no such schema": a bare 404
    is a wrong URL (or a proxy), and dead-lettering records for that would be wrong.
    """
    if status == 404 and code == _SCHEMA_NOT_FOUND:
        raise UnknownSchemaId(f"{what}: {message}")
    if status == 404 and code in _SUBJECT_OR_VERSION_NOT_FOUND:
        raise NotFound(f"{what}: {message}")
    if status >= 500 or status in (408, 429):
        raise RegistryUnavailable(f"schema registry: {what}: {status} {message}")
    if status == 404:
        raise RegistryRefused(
            f"schema registry: {what}: 404 Not Found, and not as a registry says it; "
            "is the URL the registry's Confluent-compatible API "
            "(for Apicurio: .../apis/ccompat/v7)?"
        )
    raise RegistryRefused(f"schema registry refused {what}: {status} {message}")


def _error_code(answer: httpx.Response) -> int | None:
    try:
        code = answer.json().get("error_code")
    except (ValueError, AttributeError):
        return None
    return int(code) if isinstance(code, int) else None
