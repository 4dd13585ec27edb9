"""Topic formats, and the ports' schemas against a schema registry's subjects.

Without a registry, a topic in a registry format is an error
(``registry-not-configured``): the application could not start. With one
(``verify --registry URL``, and ``deploy``), each registry topic's subject is
checked the way the runtime will meet it, located at the port:

* a producer's schema must be accepted by the subject's compatibility rule
  (the registry's own check, so its configured level applies);
* a consumer's schema must be able to read every version of the subject
  (records of each may still be in the topic; Avro's resolution rules, as
  the codec will apply them);
* a producer that may not register (``register: never``) must find its
  schema registered already, or it would fail at start;
* a subject the application consumes should not let producers register what
  its consumers cannot read: a level such as BACKWARD or NONE is a warning at
  the topic (the records of such a schema would be dead-lettered), naming the
  level streamflow gives the subjects it creates.

The registry sits behind the :class:`~streamflow.schema.registry.Registry`
protocol, so this pass holds no network code of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.blueprint.model import KafkaSpec
from streamflow.blueprint.report import Reporter
from streamflow.blueprint.structure import PortUse, TopicDraft
from streamflow.blueprint.verify_topics import resolve_port
from streamflow.schema import compat
from streamflow.schema.formats import (
    UNSAFE_FOR_CONSUMERS,
    RegisterPolicy,
    TopicFormat,
    consumer_compatibility,
    subject_for,
)
from streamflow.schema.registry import (
    Registry,
    RegistryError,
    RegistryUnavailable,
    SchemaNotRegistered,
    redacted,
    registry_text,
)
from streamflow.schema.store import Schema, SchemaError, SchemaStore

__all__ = ["check_formats", "check_registry"]

_CONFIGURE_HINT = (
    "set kafka.schema_registry: URL in the blueprint, pass --registry URL, "
    "or set $STREAMFLOW_SCHEMA_REGISTRY_URL"
)


def check_formats(
    topics: Mapping[str, TopicDraft],
    *,
    kafka: KafkaSpec,
    registry: Registry | None,
    report: Reporter,
) -> None:
    if kafka.schema_registry or registry is not None:
        return
    for topic in topics.values():
        if topic.format.uses_registry:
            report.error(
                "registry-not-configured",
                f"topic {topic.name} has format {topic.format}, which needs a schema registry, "
                "and none is configured",
                topic.format_node or topic.key,
                hint=_CONFIGURE_HINT,
            )


def check_registry(
    topics: Mapping[str, TopicDraft],
    *,
    kafka: KafkaSpec,
    descriptors: Mapping[str, StreamletDescriptor],
    store: SchemaStore,
    registry: Registry,
    report: Reporter,
) -> None:
    for topic in topics.values():
        if not topic.format.uses_registry:
            continue
        try:
            _check_topic(topic, kafka, descriptors, store, registry, report)
        except RegistryUnavailable as exc:
            report.error(
                "registry-unreachable",
                f"cannot check topic {topic.name} against the schema registry at "
                f"{redacted(registry.url)}: {exc}",
                topic.format_node or topic.key,
                hint="check the URL and that the registry is running",
            )
            return
        except RegistryError as exc:
            report.error(
                "registry-error",
                f"topic {topic.name}: {exc}",
                topic.format_node or topic.key,
            )


def _check_topic(
    topic: TopicDraft,
    kafka: KafkaSpec,
    descriptors: Mapping[str, StreamletDescriptor],
    store: SchemaStore,
    registry: Registry,
    report: Reporter,
) -> None:
    subject = subject_for(topic.name)
    kind = topic.format.registry_schema_type
    may_register = (topic.register or kafka.register) is RegisterPolicy.AUTO  # unset: never
    for use, schema in _port_schemas(topic.producers, descriptors, store):
        text = registry_text(schema, kind)
        reasons = registry.compatible(subject, kind, text)
        if reasons:
            report.error(
                "incompatible-schema",
                f"topic {topic.name}: {use.ref} writes {schema.name}, which the registry's "
                f"compatibility rule for subject {subject} refuses: " + "; ".join(reasons),
                use.node,
                hint="evolve the schema compatibly (add fields with defaults), or change "
                "the subject's compatibility level on purpose",
            )
        elif not may_register:
            try:
                registry.id_for(subject, kind, text, register=False)
            except SchemaNotRegistered:
                report.error(
                    "schema-not-registered",
                    f"topic {topic.name}: {use.ref} writes {schema.name}, which is not "
                    f"registered under subject {subject}, and register is never",
                    use.node,
                    hint="register the schema under that subject, or set `register: auto` "
                    "on the topic",
                )
    readers = _port_schemas(topic.consumers, descriptors, store)
    if not readers:
        return
    _check_protection(topic, subject, [str(use.ref) for use, _ in readers], registry, report)
    if topic.format is not TopicFormat.AVRO_REGISTRY:
        return  # JSON is checked record by record against the port's schema
    # every version may still have records in the topic, not only the latest
    for version in registry.versions(subject):
        where = f"version {version.version} of subject {subject} (id {version.schema_id})"
        if version.schema_type != "AVRO":
            report.error(
                "incompatible-schema",
                f"topic {topic.name} has format avro-registry, but {where} is a "
                f"{version.schema_type} schema",
                topic.format_node or topic.key,
                hint="use the topic's registry format (json-registry for JSON Schema)",
            )
            continue
        try:
            writer = store.version_from(json.loads(version.text))
        except (ValueError, SchemaError):
            continue  # the codec reports it per record, with the id
        for use, reader in readers:
            problems = compat.compatibility_problems(reader=reader, writer=writer)
            if problems:
                report.error(
                    "incompatible-schema",
                    f"topic {topic.name}: {use.ref} reads {reader.name}, which cannot read "
                    f"{where}: " + "; ".join(problems),
                    use.node,
                    hint="make the consumer's schema a compatible evolution of the subject's",
                )


def _check_protection(
    topic: TopicDraft, subject: str, consumers: list[str], registry: Registry, report: Reporter
) -> None:
    """Warn when the subject's level lets a producer register what our consumers cannot read.

    Only a subject that exists: one streamflow creates gets a protective level
    then (:mod:`streamflow.runtime.codecs`); one that does not exist yet will be
    made by whoever registers first, and there is no level to read until then.
    """
    if registry.latest(subject) is None:
        return
    level = registry.compatibility(subject)
    if level not in UNSAFE_FOR_CONSUMERS:
        return
    wanted = consumer_compatibility(topic.config)
    report.warning(
        "unsafe-compatibility",
        f"topic {topic.name}: subject {subject} has compatibility {level}, which lets a "
        f"producer register a schema that {', '.join(consumers)} cannot read (one that "
        "drops a field they need, say); their records would go to the dead-letter topic",
        topic.key,
        hint=f"set the subject's level to {wanted} (what streamflow gives the subjects it "
        f"creates for a topic like this one): PUT {redacted(registry.url)}/config/{subject} "
        f'{{"compatibility": "{wanted}"}}',
    )


def _port_schemas(
    uses: list[PortUse], descriptors: Mapping[str, StreamletDescriptor], store: SchemaStore
) -> list[tuple[PortUse, Schema]]:
    out = []
    for use in uses:
        port = resolve_port(use, descriptors)
        schema = store.find(port.schema) if port is not None else None
        if schema is not None:
            out.append((use, schema))
    return out
