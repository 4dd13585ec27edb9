"""The Application model: one verified blueprint as pure data.

The CLI, the local runner, the runtime and the operator all work from this
model; only the verifier reads YAML. It round-trips through plain JSON
(``to_dict``/``from_dict``) so it can be handed to a replica process
(``--app-spec``) or stored as the spec of a Kubernetes custom resource.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamflow.api import descriptor as descriptors
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.schema import fields
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits
from streamflow.schema.fields import declared
from streamflow.schema.formats import DEFAULT_FORMAT, RegisterPolicy, TopicFormat

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "GUARANTEES",
    "KINDS",
    "QUANTITY_PATTERN",
    "RESOURCES",
    "RESOURCES_SCHEMA",
    "Application",
    "AutoscaleSpec",
    "KafkaSpec",
    "PortRef",
    "StreamletSpec",
    "TopicSpec",
    "changelog_topic",
    "consumer_group",
    "dlq_topic",
]


def consumer_group(app: str, streamlet: str) -> str:
    """The consumer group of ``streamlet``'s replicas."""
    return f"{app}.{streamlet}"


def dlq_topic(app: str, streamlet: str) -> str:
    """``streamlet``'s dead-letter topic, unless its spec names one."""
    return f"{app}.{streamlet}.dlq"


def changelog_topic(app: str, streamlet: str, inlet: str) -> str:
    """The compacted topic that backs a stateful streamlet's state of one data inlet."""
    return f"{app}.{streamlet}.{inlet}.changelog"


AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)


@dataclass(frozen=True, order=True)
class PortRef:
    """``streamlet.port`` as written in a topic's producers or consumers."""

    streamlet: str
    port: str

    def __str__(self) -> str:
        return f"{self.streamlet}.{self.port}"

    @classmethod
    def parse(cls, text: str) -> PortRef:
        streamlet, _, port = text.partition(".")
        return cls(streamlet, port)


# A replica's resources, written as a Kubernetes container's (verify_resources checks them)
KINDS = ("requests", "limits")
RESOURCES = ("cpu", "memory", "ephemeral-storage")
# Kubernetes' quantity: a decimal number with an optional SI or binary suffix (no sign here).
QUANTITY_PATTERN = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
_AMOUNT = {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}
RESOURCES_SCHEMA = {
    kind: {"type": "object", "properties": dict.fromkeys(RESOURCES, _AMOUNT)} for kind in KINDS
}

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_PORT_REFS = {"items": {"type": "string", "pattern": r"^[^.\s]+\.[^.\s]+$"}}
_SCALARS = {"additionalProperties": {"x-kubernetes-int-or-string": True}}


@dataclass(frozen=True)
class TopicSpec:
    name: str = field(metadata=fields.NAME_IN_MAPPING)
    producers: tuple[PortRef, ...] = field(
        default=(),
        metadata=declared("streamlet.outlet references.", parse=PortRef.parse, openapi=_PORT_REFS),
    )
    consumers: tuple[PortRef, ...] = field(
        default=(),
        metadata=declared("streamlet.inlet references.", parse=PortRef.parse, openapi=_PORT_REFS),
    )
    partitions: int = field(default=1, metadata=declared("Partitions.", minimum=1))
    replication: int = field(default=1, metadata=declared("Copies of each partition.", minimum=1))
    config: Mapping[str, str] = field(
        default_factory=dict,
        metadata=declared("Kafka topic config, e.g. cleanup.policy.", openapi=_SCALARS),
    )
    managed: bool = field(default=True, metadata=declared("false: the topic must exist."))
    format: TopicFormat = field(
        default=DEFAULT_FORMAT,
        metadata=declared("How records are encoded on the wire (default avro)."),
    )
    register: RegisterPolicy | None = field(  # None: the application's default
        default=None, metadata=declared("May producers register their schema: auto or never.")
    )

    @property
    def compacted(self) -> bool:
        return "compact" in str(self.config.get("cleanup.policy", ""))


@dataclass(frozen=True)
class AutoscaleSpec:
    """``autoscale:`` of a streamlet: replicas follow the lag of its input, within bounds.

    ``target_lag`` is the lag (records behind, summed over the input's
    partitions) one replica is meant to carry; the windows are how long a
    higher (``scale_up_after``) or lower (``scale_down_after``) count must
    keep being wanted before it is applied, against flapping. ``keda``: on a
    cluster with KEDA, let a ScaledObject do it instead of the operator.
    """

    min: int = field(default=1, metadata=declared("The fewest replicas.", minimum=0))
    max: int = field(default=8, metadata=declared("The most replicas.", minimum=1))
    target_lag: int = field(
        default=1000,
        metadata=declared("The lag (records) one replica is meant to carry.", minimum=1),
    )
    scale_up_after: float = field(
        default=0.0, metadata=declared("Seconds a higher count must last.", minimum=0)
    )
    scale_down_after: float = field(
        default=120.0, metadata=declared("Seconds a lower count must last.", minimum=0)
    )
    keda: bool = field(default=False, metadata=declared("Let KEDA scale it, where installed."))

    def to_dict(self) -> dict[str, Any]:
        return fields.to_plain(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AutoscaleSpec:
        return fields.from_plain(cls, data)


@dataclass(frozen=True)
class StreamletSpec:
    name: str = field(metadata=fields.NAME_IN_MAPPING)
    class_path: str = field(
        metadata=declared(
            "The streamlet class, module:Class.", key="class", required=True, minLength=1
        )
    )
    config: Mapping[str, Any] = field(
        default_factory=dict,
        metadata=declared(
            "Parameter values; checked against the class's parameters.",
            openapi={"x-kubernetes-preserve-unknown-fields": True},
        ),
    )
    replicas: int = field(default=1, metadata=declared("Pods to run.", minimum=0))
    guarantee: str = field(
        default=AT_LEAST_ONCE,
        metadata=declared("What survives a failure.", enum=list(GUARANTEES)),
    )
    dlq: str | None = field(
        default=None,
        metadata=declared("The dead-letter topic; default <app>.<streamlet>.dlq."),
    )
    autoscale: AutoscaleSpec | None = field(
        default=None,
        metadata=declared("Replicas follow the lag of the streamlet's input, within bounds."),
    )
    # None: the target's default. The local target ignores it.
    resources: Mapping[str, Mapping[str, str]] | None = field(
        default=None,
        metadata=declared(
            "CPU and memory of this streamlet's pods, as a container's.",
            properties=RESOURCES_SCHEMA,
        ),
    )
    # None: the runtime's default (runtime.health.DEFAULT_STALL_AFTER_S)
    stall_after: float | None = field(
        default=None,
        metadata=declared(
            "Seconds a pod with records waiting may take none before its liveness probe "
            "fails (default 60).",
            omit_default=True,
            minimum=5,
        ),
    )
    # Reading every input's headers costs CPU; an application that is never scored may
    # turn it off (runtime/lineage.py).
    lineage: bool = field(
        default=True,
        metadata=declared(
            "Copy the lineage headers of `streamflow score` from each input to its outputs "
            "(default true).",
            omit_default=True,
        ),
    )
    decode_limits: DecodeLimits = field(
        default=DEFAULT_LIMITS,
        metadata=declared(
            "What one input record may declare once decoded; past a limit it is "
            "dead-lettered before it is decoded.",
            omit_default=True,
            openapi={"nullable": True},  # null: the defaults, as when it is left out
        ),
    )


@dataclass(frozen=True)
class KafkaSpec:
    """Where the application's Kafka is. ``bootstrap`` None means: the embedded broker."""

    bootstrap: str | None = field(default=None, metadata=declared("Kafka bootstrap servers."))
    config: Mapping[str, str] = field(
        default_factory=dict,
        metadata=declared("librdkafka properties (no credentials).", openapi=_SCALARS),
    )
    secret: str | None = field(
        default=None, metadata=declared("The Secret that holds the Kafka credentials.")
    )
    schema_registry: str | None = field(default=None, metadata=declared("The schema registry URL."))
    register: RegisterPolicy | None = field(  # unset: never (the devkit's: auto)
        default=None, metadata=declared("Topics' default register policy.")
    )


@dataclass(frozen=True)
class Application:
    name: str = field(
        metadata=declared(
            "The application's name.", required=True, pattern=_DNS_LABEL, maxLength=63
        )
    )
    streamlets: Mapping[str, StreamletSpec] = field(
        metadata=declared("The streamlets, by name.", keyed_by="name", minProperties=1)
    )
    topics: Mapping[str, TopicSpec] = field(
        metadata=declared("The topics, by name.", keyed_by="name")
    )
    kafka: KafkaSpec = field(default_factory=KafkaSpec, metadata=declared("Where Kafka is."))
    schema_paths: tuple[str, ...] = field(
        default=(),
        metadata=declared("Where schemas are looked for.", blueprint="schemas"),
    )
    python_paths: tuple[str, ...] = field(
        default=(), metadata=declared("Where streamlet modules are looked for.")
    )
    source: str = field(default="", metadata=declared("The blueprint's file name.", blueprint=None))
    _descriptors: dict[str, StreamletDescriptor] = field(
        default_factory=dict, compare=False, repr=False
    )

    # -- queries -------------------------------------------------------------

    def descriptor(self, streamlet: str) -> StreamletDescriptor:
        """The descriptor of a streamlet's class, loaded on first use.

        The class comes from streamflow or the python_paths only, as when the
        blueprint was verified: a spec edited since is held to the same rule.
        """
        cached = self._descriptors.get(streamlet)
        if cached is None:
            spec = self.streamlets[streamlet]
            cls = descriptors.load_streamlet_class(spec.class_path, python_paths=self.python_paths)
            cached = descriptors.describe(cls, class_path=spec.class_path)
            self._descriptors[streamlet] = cached
        return cached

    def topic_for(self, streamlet: str, port: str) -> TopicSpec | None:
        """The topic a port is connected to, if any."""
        ref = PortRef(streamlet, port)
        for topic in self.topics.values():
            if ref in topic.producers or ref in topic.consumers:
                return topic
        return None

    def register_policy(self, topic: TopicSpec) -> RegisterPolicy:
        return topic.register or self.kafka.register or RegisterPolicy.NEVER

    @property
    def uses_registry(self) -> bool:
        return any(t.format.uses_registry for t in self.topics.values())

    def dlq_topic(self, streamlet: str) -> str:
        spec = self.streamlets[streamlet]
        return spec.dlq or dlq_topic(self.name, streamlet)

    def changelog_topic(self, streamlet: str, inlet: str) -> str:
        """The compacted topic that backs a stateful streamlet's state of one data inlet."""
        return changelog_topic(self.name, streamlet, inlet)

    def changelog_topics(self) -> list[str]:
        """Every changelog topic the application could have (the stateful streamlets' are
        known only to their classes: this names one per data inlet of each streamlet)."""
        return sorted(
            {
                self.changelog_topic(ref.streamlet, ref.port)
                for topic in self.topics.values()
                for ref in topic.consumers
                if ref.streamlet in self.streamlets
            }
        )

    def consumer_group(self, streamlet: str) -> str:
        return consumer_group(self.name, streamlet)

    # -- changes -------------------------------------------------------------

    def with_replicas(self, streamlet: str, replicas: int) -> Application:
        spec = dataclasses.replace(self.streamlets[streamlet], replicas=replicas)
        return dataclasses.replace(self, streamlets={**self.streamlets, streamlet: spec})

    def with_config(self, streamlet: str, config: Mapping[str, Any]) -> Application:
        merged = {**self.streamlets[streamlet].config, **config}
        spec = dataclasses.replace(self.streamlets[streamlet], config=merged)
        return dataclasses.replace(
            self, streamlets={**self.streamlets, streamlet: spec}, _descriptors={}
        )

    # -- plain data ----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The plain (JSON) form, under the blueprint's field names (see schema.fields)."""
        return fields.to_plain(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Application:
        return fields.from_plain(cls, data)
