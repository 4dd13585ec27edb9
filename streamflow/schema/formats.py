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

__all__ = ["DEFAULT_FORMAT", "RegisterPolicy", "TopicFormat", "subject_for"]


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
