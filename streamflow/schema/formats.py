"""Topic formats: how the records of one topic are laid out on the wire.

A format belongs to a topic, not to a port: every producer and consumer of a
topic agrees on it, and the codec for a port is chosen from its topic's format
in exactly one place (:meth:`streamflow.runtime.codecs.Codecs.for_topic`), so the
runtime, ``tail``, the ingresses and ``model push`` can never disagree.

* ``avro``: Avro single-object encoding (``C3 01``, the 8-byte fingerprint, the
  body). The default; needs no registry.
* ``avro-registry``: the Confluent Schema Registry wire format (byte ``0``, a
  4-byte big-endian schema id, the Avro body).
* ``json-registry``: the same framing around a UTF-8 JSON document, with a
  JSON Schema in the registry.
* ``json``: plain JSON objects, validated against the port's Avro schema.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

__all__ = [
    "DEFAULT_FORMAT",
    "UNSAFE_FOR_CONSUMERS",
    "RegisterPolicy",
    "TopicFormat",
    "consumer_compatibility",
    "keeps_records",
    "subject_for",
]


class TopicFormat(enum.StrEnum):
    AVRO = "avro"
    AVRO_REGISTRY = "avro-registry"
    JSON_REGISTRY = "json-registry"
    JSON = "json"

    @property
    def uses_registry(self) -> bool:
        return self in (TopicFormat.AVRO_REGISTRY, TopicFormat.JSON_REGISTRY)

    @property
    def registry_schema_type(self) -> str:
        """The registry's ``schemaType`` for this format's schemas."""
        return "JSON" if self is TopicFormat.JSON_REGISTRY else "AVRO"


class RegisterPolicy(enum.StrEnum):
    """Whether a producer may register its schema under the topic's subject.

    ``never`` is the production default: schemas are registered by whoever owns
    the subject (a CI job, a platform team), and a producer whose schema is not
    there fails at start with a message saying so. The devkit's own registry
    defaults to ``auto``, so a laptop run needs no set-up.
    """

    AUTO = "auto"
    NEVER = "never"


DEFAULT_FORMAT = TopicFormat.AVRO


def subject_for(topic: str) -> str:
    """The subject of a topic's values under the topic-name strategy (the registry default)."""
    return f"{topic}-value"


#: Compatibility levels under which a producer may register a schema that the
#: subject's existing readers cannot read: BACKWARD only protects *new readers of
#: old data* (a writer may drop a field a reader needs), NONE protects nothing.
UNSAFE_FOR_CONSUMERS = frozenset({"BACKWARD", "BACKWARD_TRANSITIVE", "NONE"})


def keeps_records(config: Mapping[str, str]) -> bool:
    """Whether a topic keeps its records for good (compacted, or unlimited retention)."""
    compacted = "compact" in str(config.get("cleanup.policy", ""))
    return compacted or str(config.get("retention.ms", "")).strip() == "-1"


def consumer_compatibility(config: Mapping[str, str]) -> str:
    """The level streamflow gives a subject it creates for a topic it consumes.

    FORWARD_TRANSITIVE: every new writer schema must be readable by every
    registered one, so no producer can register what a consumer cannot read.
    A topic that keeps its records for good (a compacted one, or one with
    ``retention.ms: -1``) gets FULL_TRANSITIVE: its consumers will also meet
    the oldest records after they upgrade, so each version must read them too.
    """
    return "FULL_TRANSITIVE" if keeps_records(config) else "FORWARD_TRANSITIVE"
