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
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits
from streamflow.schema.formats import DEFAULT_FORMAT, RegisterPolicy, TopicFormat

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "GUARANTEES",
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


@dataclass(frozen=True)
class TopicSpec:
    name: str
    producers: tuple[PortRef, ...] = ()
    consumers: tuple[PortRef, ...] = ()
    partitions: int = 1
    replication: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    managed: bool = True
    format: TopicFormat = DEFAULT_FORMAT
    register: RegisterPolicy | None = None  # None: the application's default

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

    min: int = 1
    max: int = 8
    target_lag: int = 1000
    scale_up_after: float = 0.0
    scale_down_after: float = 120.0
    keda: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AutoscaleSpec:
        return cls(
            min=int(data.get("min", 1)),
            max=int(data.get("max", 8)),
            target_lag=int(data.get("target_lag", 1000)),
            scale_up_after=float(data.get("scale_up_after", 0.0)),
            scale_down_after=float(data.get("scale_down_after", 120.0)),
            keda=bool(data.get("keda", False)),
        )


@dataclass(frozen=True)
class StreamletSpec:
    name: str
    class_path: str
    config: Mapping[str, Any] = field(default_factory=dict)
    replicas: int = 1
    guarantee: str = AT_LEAST_ONCE
    dlq: str | None = None
    autoscale: AutoscaleSpec | None = None
    # CPU and memory of its replicas, Kubernetes-style ({requests: {...}, limits: {...}});
    # None: the target's default. The local target ignores it.
    resources: Mapping[str, Mapping[str, str]] | None = None
    # A replica with work that takes nothing for this long is not live (restarted);
    # None: the runtime's default (runtime.health.DEFAULT_STALL_AFTER_S)
    stall_after: float | None = None
    # Whether its outputs carry the lineage headers of `streamflow score` from their
    # inputs (runtime/lineage.py). Reading every input's headers costs CPU; an
    # application that is never scored may turn it off.
    lineage: bool = True
    # What one record may declare once decoded (schema.bounds); the defaults unless set
    decode_limits: DecodeLimits = DEFAULT_LIMITS


@dataclass(frozen=True)
class KafkaSpec:
    """Where the application's Kafka is. ``bootstrap`` None means: the embedded broker."""

    bootstrap: str | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    secret: str | None = None
    schema_registry: str | None = None
    register: RegisterPolicy | None = None  # topics' default; unset: never (the devkit's: auto)


@dataclass(frozen=True)
class Application:
    name: str
    streamlets: Mapping[str, StreamletSpec]
    topics: Mapping[str, TopicSpec]
    kafka: KafkaSpec = field(default_factory=KafkaSpec)
    schema_paths: tuple[str, ...] = ()
    python_paths: tuple[str, ...] = ()
    source: str = ""
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
        return {
            "name": self.name,
            "source": self.source,
            "schema_paths": list(self.schema_paths),
            "python_paths": list(self.python_paths),
            "kafka": {
                "bootstrap": self.kafka.bootstrap,
                "config": dict(self.kafka.config),
                "secret": self.kafka.secret,
                "schema_registry": self.kafka.schema_registry,
                "register": str(self.kafka.register) if self.kafka.register else None,
            },
            "streamlets": {
                name: {
                    "class": s.class_path,
                    "config": dict(s.config),
                    "replicas": s.replicas,
                    "guarantee": s.guarantee,
                    "dlq": s.dlq,
                    "autoscale": s.autoscale.to_dict() if s.autoscale else None,
                    "resources": {k: dict(v) for k, v in s.resources.items()}
                    if s.resources is not None
                    else None,
                    **({"stall_after": s.stall_after} if s.stall_after is not None else {}),
                    **({} if s.lineage else {"lineage": False}),
                    **(
                        {"decode_limits": s.decode_limits.to_dict()}
                        if s.decode_limits != DEFAULT_LIMITS
                        else {}
                    ),
                }
                for name, s in self.streamlets.items()
            },
            "topics": {
                name: {
                    "producers": [str(p) for p in t.producers],
                    "consumers": [str(c) for c in t.consumers],
                    "partitions": t.partitions,
                    "replication": t.replication,
                    "config": dict(t.config),
                    "managed": t.managed,
                    "format": str(t.format),
                    "register": str(t.register) if t.register else None,
                }
                for name, t in self.topics.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Application:
        kafka = data.get("kafka") or {}
        return cls(
            name=data["name"],
            source=data.get("source", ""),
            schema_paths=tuple(data.get("schema_paths", ())),
            python_paths=tuple(data.get("python_paths", ())),
            kafka=KafkaSpec(
                bootstrap=kafka.get("bootstrap"),
                config=dict(kafka.get("config") or {}),
                secret=kafka.get("secret"),
                schema_registry=kafka.get("schema_registry"),
                register=RegisterPolicy(kafka["register"]) if kafka.get("register") else None,
            ),
            streamlets={
                name: StreamletSpec(
                    name=name,
                    class_path=s["class"],
                    config=dict(s.get("config") or {}),
                    replicas=int(s.get("replicas", 1)),
                    guarantee=s.get("guarantee", AT_LEAST_ONCE),
                    dlq=s.get("dlq"),
                    autoscale=AutoscaleSpec.from_dict(s["autoscale"])
                    if s.get("autoscale")
                    else None,
                    resources={k: dict(v) for k, v in s["resources"].items()}
                    if s.get("resources")
                    else None,
                    stall_after=float(s["stall_after"]) if s.get("stall_after") else None,
                    lineage=bool(s.get("lineage", True)),
                    decode_limits=DecodeLimits.from_dict(s.get("decode_limits")),
                )
                for name, s in data["streamlets"].items()
            },
            topics={
                name: TopicSpec(
                    name=name,
                    producers=tuple(PortRef.parse(p) for p in t.get("producers", ())),
                    consumers=tuple(PortRef.parse(c) for c in t.get("consumers", ())),
                    partitions=int(t.get("partitions", 1)),
                    replication=int(t.get("replication", 1)),
                    config={k: str(v) for k, v in (t.get("config") or {}).items()},
                    managed=bool(t.get("managed", True)),
                    format=TopicFormat(t.get("format") or DEFAULT_FORMAT),
                    register=RegisterPolicy(t["register"]) if t.get("register") else None,
                )
                for name, t in data["topics"].items()
            },
        )
