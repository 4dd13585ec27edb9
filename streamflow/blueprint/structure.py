"""The first pass of the verifier: the blueprint's fields, their types and names.

It checks the document against the blueprint format (required and unknown
fields, types, names) and reads it into *drafts*. A draft keeps the YAML nodes
of what it read, so the later passes (classes, config, ports, schemas) can
still point at the exact line and column. A field that is wrong is reported
and then left at its default, so the later passes still run and find more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamflow.api.descriptor import is_dns_label
from streamflow.blueprint import readers
from streamflow.blueprint.model import (
    AT_LEAST_ONCE,
    Application,
    AutoscaleSpec,
    KafkaSpec,
    PortRef,
    StreamletSpec,
    TopicSpec,
)
from streamflow.blueprint.readers import is_topic_name
from streamflow.blueprint.report import Reporter
from streamflow.blueprint.verify_autoscale import read_autoscale
from streamflow.blueprint.verify_decode_limits import read_decode_limits
from streamflow.blueprint.verify_resources import read_resources
from streamflow.blueprint.yamlload import Node
from streamflow.schema import fields, registry
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits
from streamflow.schema.formats import DEFAULT_FORMAT, RegisterPolicy, TopicFormat

__all__ = [
    "BlueprintDraft",
    "PortUse",
    "StreamletDraft",
    "TopicDraft",
    "is_topic_name",
    "read_blueprint",
]

# What a blueprint may write in each section: the Application's field table (schema.fields)
TOP_FIELDS = fields.blueprint_keys(Application)
KAFKA_FIELDS = fields.blueprint_keys(KafkaSpec)
STREAMLET_FIELDS = fields.blueprint_keys(StreamletSpec)
TOPIC_FIELDS = fields.blueprint_keys(TopicSpec)


@dataclass
class PortUse:
    """One ``streamlet.port`` entry in a topic's producers or consumers."""

    ref: PortRef
    node: Node
    topic: str
    role: str  # "producer" or "consumer"


@dataclass
class StreamletDraft:
    name: str
    key: Node
    class_path: str | None = None
    class_node: Node | None = None
    config: dict[str, tuple[Node, Node]] = field(default_factory=dict)
    replicas: int = 1
    guarantee: str = AT_LEAST_ONCE
    dlq: str | None = None
    replicas_node: Node | None = None
    autoscale: AutoscaleSpec | None = None
    autoscale_node: Node | None = None
    resources: dict[str, dict[str, str]] | None = None
    stall_after: float | None = None
    lineage: bool = True
    decode_limits: DecodeLimits = DEFAULT_LIMITS


@dataclass
class TopicDraft:
    name: str
    key: Node
    producers: list[PortUse] = field(default_factory=list)
    consumers: list[PortUse] = field(default_factory=list)
    partitions: int = 1
    replication: int = 1
    config: dict[str, str] = field(default_factory=dict)
    managed: bool = True
    format: TopicFormat = DEFAULT_FORMAT
    format_node: Node | None = None
    register: RegisterPolicy | None = None

    @property
    def compacted(self) -> bool:
        return "compact" in self.config.get("cleanup.policy", "")


@dataclass
class BlueprintDraft:
    root: Node
    name: str | None = None
    schemas: list[tuple[str, Node]] = field(default_factory=list)
    python_paths: list[tuple[str, Node]] = field(default_factory=list)
    kafka: KafkaSpec = field(default_factory=KafkaSpec)
    streamlets: dict[str, StreamletDraft] = field(default_factory=dict)
    streamlets_key: Node | None = None
    topics: dict[str, TopicDraft] = field(default_factory=dict)


def read_blueprint(root: Node | None, report: Reporter) -> BlueprintDraft | None:
    """The draft of a parsed blueprint; None when the document is not a mapping at all."""
    root = root or Node("map", 1, 1)
    if root.kind != "map":
        report.error(
            "wrong-type",
            f"a blueprint must be a mapping with name, streamlets and topics, "
            f"got {root.describe()}",
            root,
        )
        return None
    readers.fields(
        report,
        root,
        what="the blueprint",
        allowed=TOP_FIELDS,
        required=fields.required_keys(Application),
    )
    draft = BlueprintDraft(root=root)
    for text, key, value in root.fields():
        if value.is_null:
            continue
        if text == "name":
            draft.name = _name(report, value)
        elif text == "schemas":
            draft.schemas = readers.string_list(report, value, what="schemas")
        elif text == "python_paths":
            draft.python_paths = readers.string_list(report, value, what="python_paths")
        elif text == "kafka":
            draft.kafka = _kafka(report, value)
        elif text == "streamlets":
            draft.streamlets_key = key
            draft.streamlets = _streamlets(report, value)
        elif text == "topics":
            draft.topics = _topics(report, value)
    return draft


# -- sections --------------------------------------------------------------


def _name(report: Reporter, node: Node) -> str | None:
    name = readers.string(report, node, what="name")
    if name is not None and not is_dns_label(name):
        report.error(
            "invalid-name",
            f"application name {name!r} is not a DNS label ({readers.DNS_RULES})",
            node,
            hint=readers.dns_hint(name),
        )
    return name


def _kafka(report: Reporter, node: Node) -> KafkaSpec:
    if not readers.fields(report, node, what="kafka", allowed=KAFKA_FIELDS):
        return KafkaSpec()
    values: dict[str, Any] = {}
    for text, _, value in node.fields():
        if value.is_null or text not in KAFKA_FIELDS:
            continue
        if text == "config":
            values[text] = readers.string_map(report, value, what="kafka.config")
        elif text == "register":
            policy = readers.choice(
                report, value, RegisterPolicy, what="kafka.register", code="invalid-register"
            )
            if policy is not None:
                values[text] = policy
        elif text == "schema_registry":
            url = readers.string(report, value, what="kafka.schema_registry")
            problem = registry.url_problem(url) if url is not None else None
            if problem:
                credentials = url is not None and registry.has_credentials(url)
                code = "secret-in-config" if credentials else "invalid-registry-url"
                report.error(code, problem, value)
            elif url is not None:
                values[text] = url
        else:
            values[text] = readers.string(report, value, what=f"kafka.{text}")
    return KafkaSpec(**values)


def _streamlets(report: Reporter, node: Node) -> dict[str, StreamletDraft]:
    if node.kind != "map":
        report.error(
            "wrong-type", f"streamlets must be a mapping of names, got {node.describe()}", node
        )
        return {}
    out: dict[str, StreamletDraft] = {}
    for name, key, value in node.fields():
        if not is_dns_label(name):
            report.error(
                "invalid-name",
                f"streamlet name {name!r} is not a DNS label ({readers.DNS_RULES})",
                key,
                hint=readers.dns_hint(name),
            )
        draft = StreamletDraft(name=name, key=key)
        what = f"streamlet {name!r}"
        if value.is_null:  # `source:` with nothing under it: a streamlet without a class
            value = Node("map", value.line, value.column)
        if readers.fields(
            report,
            value,
            what=what,
            allowed=STREAMLET_FIELDS,
            required=fields.required_keys(StreamletSpec),
            key=key,
        ):
            _streamlet_fields(report, value, draft)
        out[name] = draft
    return out


def _streamlet_fields(report: Reporter, node: Node, draft: StreamletDraft) -> None:
    for text, _, value in node.fields():
        if value.is_null:
            continue
        if text == "class":
            draft.class_path = readers.string(report, value, what="class")
            draft.class_node = value
        elif text == "config":
            draft.config = readers.config_nodes(report, value, what=f"{draft.name}.config")
        elif text == "replicas":
            draft.replicas = readers.replicas(report, value, default=draft.replicas)
            draft.replicas_node = value
        elif text == "guarantee":
            draft.guarantee = readers.guarantee(report, value)
        elif text == "dlq":
            draft.dlq = readers.topic_name(report, value, what="dead-letter topic")
        elif text == "autoscale":
            draft.autoscale_node = value
            draft.autoscale = read_autoscale(report, value, streamlet=draft.name)
        elif text == "resources":
            draft.resources = read_resources(report, value, streamlet=draft.name)
        elif text == "stall_after":
            draft.stall_after = readers.stall_after(report, value, streamlet=draft.name)
        elif text == "lineage":
            lineage = readers.boolean(report, value, what=f"{draft.name}.lineage")
            draft.lineage = True if lineage is None else lineage
        elif text == "decode_limits":
            limits = read_decode_limits(report, value, streamlet=draft.name)
            draft.decode_limits = limits or DEFAULT_LIMITS
    if draft.autoscale is not None and draft.replicas_node is None:
        draft.replicas = draft.autoscale.min  # autoscaled: it starts at its minimum


def _topics(report: Reporter, node: Node) -> dict[str, TopicDraft]:
    if node.kind != "map":
        report.error(
            "wrong-type", f"topics must be a mapping of names, got {node.describe()}", node
        )
        return {}
    out: dict[str, TopicDraft] = {}
    for name, key, value in node.fields():
        if not readers.is_topic_name(name):
            readers.bad_topic_name(report, name, key, what="topic name")
        draft = TopicDraft(name=name, key=key)
        if not value.is_null and readers.fields(
            report, value, what=f"topic {name!r}", allowed=TOPIC_FIELDS, key=key
        ):
            _topic_fields(report, value, draft)
        out[name] = draft
    return out


def _topic_fields(report: Reporter, node: Node, draft: TopicDraft) -> None:
    for text, _, value in node.fields():
        if value.is_null:
            continue
        if text in ("producers", "consumers"):
            role = text[:-1]
            uses = [
                PortUse(ref, item, draft.name, role)
                for ref, item in readers.port_refs(report, value, what=f"{draft.name}.{text}")
            ]
            setattr(draft, text, uses)
        elif text in ("partitions", "replication"):
            draft_value = readers.count(report, value, what=text, code=f"invalid-{text}", minimum=1)
            setattr(draft, text, draft_value if draft_value is not None else 1)
        elif text == "config":
            draft.config = readers.string_map(report, value, what=f"{draft.name}.config")
        elif text == "managed":
            managed = readers.boolean(report, value, what="managed")
            draft.managed = True if managed is None else managed
        elif text == "format":
            draft.format_node = value
            draft.format = (
                readers.choice(report, value, TopicFormat, what="format", code="unknown-format")
                or DEFAULT_FORMAT
            )
        elif text == "register":
            draft.register = readers.choice(
                report, value, RegisterPolicy, what="register", code="invalid-register"
            )
