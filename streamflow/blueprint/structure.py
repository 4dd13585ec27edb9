"""The first pass of the verifier: the blueprint's fields, their types and names.

It checks the document against the blueprint format (required and unknown
fields, types, names) and reads it into *drafts*. A draft keeps the YAML nodes
of what it read, so the later passes (classes, config, ports, schemas) can
still point at the exact line and column. A field that is wrong is reported
and then left at its default, so the later passes still run and find more.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from streamflow.api.descriptor import is_dns_label
from streamflow.api.params import parse_duration
from streamflow.blueprint.model import (
    AT_LEAST_ONCE,
    GUARANTEES,
    Application,
    AutoscaleSpec,
    KafkaSpec,
    PortRef,
    StreamletSpec,
    TopicSpec,
)
from streamflow.blueprint.report import Reporter, closest, did_you_mean
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

_STALL_AFTER_MIN_S = 5.0
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PORT_REF = re.compile(r"^([^.\s]+)\.([^.\s]+)$")
_DNS_RULES = "lowercase letters, digits and '-', at most 63, starting and ending alphanumeric"


def is_topic_name(name: str) -> bool:
    """Kafka's rule: ``[a-zA-Z0-9._-]``, at most 249 characters, not ``.`` or ``..``."""
    return bool(_TOPIC_NAME.match(name)) and name not in (".", "..")


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
    _fields(
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
            draft.schemas = _string_list(report, value, what="schemas")
        elif text == "python_paths":
            draft.python_paths = _string_list(report, value, what="python_paths")
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
    name = _string(report, node, what="name")
    if name is not None and not is_dns_label(name):
        report.error(
            "invalid-name",
            f"application name {name!r} is not a DNS label ({_DNS_RULES})",
            node,
            hint=_dns_hint(name),
        )
    return name


def _kafka(report: Reporter, node: Node) -> KafkaSpec:
    if not _fields(report, node, what="kafka", allowed=KAFKA_FIELDS):
        return KafkaSpec()
    values: dict[str, Any] = {}
    for text, _, value in node.fields():
        if value.is_null or text not in KAFKA_FIELDS:
            continue
        if text == "config":
            values[text] = _string_map(report, value, what="kafka.config")
        elif text == "register":
            policy = _choice(
                report, value, RegisterPolicy, what="kafka.register", code="invalid-register"
            )
            if policy is not None:
                values[text] = policy
        elif text == "schema_registry":
            url = _string(report, value, what="kafka.schema_registry")
            problem = registry.url_problem(url) if url is not None else None
            if problem:
                credentials = url is not None and registry.has_credentials(url)
                code = "secret-in-config" if credentials else "invalid-registry-url"
                report.error(code, problem, value)
            elif url is not None:
                values[text] = url
        else:
            values[text] = _string(report, value, what=f"kafka.{text}")
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
                f"streamlet name {name!r} is not a DNS label ({_DNS_RULES})",
                key,
                hint=_dns_hint(name),
            )
        draft = StreamletDraft(name=name, key=key)
        what = f"streamlet {name!r}"
        if value.is_null:  # `source:` with nothing under it: a streamlet without a class
            value = Node("map", value.line, value.column)
        if _fields(
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
            draft.class_path = _string(report, value, what="class")
            draft.class_node = value
        elif text == "config":
            draft.config = _config_nodes(report, value, what=f"{draft.name}.config")
        elif text == "replicas":
            draft.replicas = _replicas(report, value, default=draft.replicas)
            draft.replicas_node = value
        elif text == "guarantee":
            draft.guarantee = _guarantee(report, value)
        elif text == "dlq":
            draft.dlq = _topic_name(report, value, what="dead-letter topic")
        elif text == "autoscale":
            draft.autoscale_node = value
            draft.autoscale = read_autoscale(report, value, streamlet=draft.name)
        elif text == "resources":
            draft.resources = read_resources(report, value, streamlet=draft.name)
        elif text == "stall_after":
            draft.stall_after = _stall_after(report, value, streamlet=draft.name)
        elif text == "lineage":
            lineage = _boolean(report, value, what=f"{draft.name}.lineage")
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
        if not is_topic_name(name):
            _bad_topic_name(report, name, key, what="topic name")
        draft = TopicDraft(name=name, key=key)
        if not value.is_null and _fields(
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
                for ref, item in _port_refs(report, value, what=f"{draft.name}.{text}")
            ]
            setattr(draft, text, uses)
        elif text in ("partitions", "replication"):
            draft_value = _count(report, value, what=text, code=f"invalid-{text}", minimum=1)
            setattr(draft, text, draft_value if draft_value is not None else 1)
        elif text == "config":
            draft.config = _string_map(report, value, what=f"{draft.name}.config")
        elif text == "managed":
            managed = _boolean(report, value, what="managed")
            draft.managed = True if managed is None else managed
        elif text == "format":
            draft.format_node = value
            draft.format = (
                _choice(report, value, TopicFormat, what="format", code="unknown-format")
                or DEFAULT_FORMAT
            )
        elif text == "register":
            draft.register = _choice(
                report, value, RegisterPolicy, what="register", code="invalid-register"
            )


# -- single values ---------------------------------------------------------


def _fields(
    report: Reporter,
    node: Node,
    *,
    what: str,
    allowed: tuple[str, ...],
    required: tuple[str, ...] = (),
    key: Node | None = None,
) -> bool:
    """Check a mapping's field names; False (after a problem) if it is not a mapping."""
    if node.kind != "map":
        report.error("wrong-type", f"{what} must be a mapping, got {node.describe()}", node)
        return False
    misspelt: set[str] = set()
    for text, field_key, _ in node.fields():
        if text not in allowed:
            misspelt.add(closest(text, allowed) or "")
            report.error(
                "unknown-field",
                f"unknown field {text!r} in {what}",
                field_key,
                hint=did_you_mean(text, allowed) or f"the fields are: {', '.join(allowed)}",
            )
    for name in required:
        value = node.get(name)
        # A misspelt required field is reported once, as the unknown field with its hint.
        if (value is None or value.is_null) and name not in misspelt:
            report.error("missing-field", f"{what} needs a {name!r} field", key or node)
    return True


def _string(report: Reporter, node: Node, *, what: str) -> str | None:
    if node.kind == "scalar" and isinstance(node.value, str):
        return node.value
    report.error("wrong-type", f"{what} must be a string, got {node.describe()}", node)
    return None


def _boolean(report: Reporter, node: Node, *, what: str) -> bool | None:
    if node.kind == "scalar" and isinstance(node.value, bool):
        return node.value
    report.error("wrong-type", f"{what} must be true or false, got {node.describe()}", node)
    return None


def _count(report: Reporter, node: Node, *, what: str, code: str, minimum: int) -> int | None:
    value = node.value if node.kind == "scalar" else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    report.error(code, f"{what} must be a whole number >= {minimum}, got {node.describe()}", node)
    return None


def _replicas(report: Reporter, node: Node, *, default: int) -> int:
    count = _count(report, node, what="replicas", code="invalid-replicas", minimum=0)
    return default if count is None else count


_Choice = TypeVar("_Choice", bound=enum.StrEnum)


def _choice(
    report: Reporter, node: Node, choices: type[_Choice], *, what: str, code: str
) -> _Choice | None:
    """One of a string enum's values, or None after a problem that lists them."""
    value = node.value if node.kind == "scalar" else None
    names = [str(c) for c in choices]
    if isinstance(value, str) and value in names:
        return choices(value)
    report.error(
        code,
        f"{what} must be one of {', '.join(names)}, got {node.describe()}",
        node,
        hint=did_you_mean(str(value), names) if isinstance(value, str) else "",
    )
    return None


def _stall_after(report: Reporter, node: Node, *, streamlet: str) -> float | None:
    """How long a replica with work may take nothing before it is restarted: 5s or more."""
    try:
        seconds = parse_duration(node.value if node.kind == "scalar" else None).total_seconds()
    except ValueError as exc:
        problem = str(exc)
    else:
        if seconds >= _STALL_AFTER_MIN_S:
            return seconds
        problem = f"{seconds:g}s is shorter than {_STALL_AFTER_MIN_S:g}s"
    report.error(
        "invalid-stall-after",
        f"{streamlet}.stall_after must be a duration such as 90s or 5m: {problem}",
        node,
        hint="a replica whose logic takes longer than this on one batch is restarted",
    )
    return None


def _guarantee(report: Reporter, node: Node) -> str:
    value = node.value if node.kind == "scalar" else None
    if isinstance(value, str) and value in GUARANTEES:
        return value
    report.error(
        "invalid-guarantee",
        f"guarantee must be {' or '.join(GUARANTEES)}, got {node.describe()}",
        node,
        hint=did_you_mean(str(value), GUARANTEES) if isinstance(value, str) else "",
    )
    return AT_LEAST_ONCE


def _topic_name(report: Reporter, node: Node, *, what: str) -> str | None:
    name = _string(report, node, what=what)
    if name is not None and not is_topic_name(name):
        _bad_topic_name(report, name, node, what=what)
    return name


def _bad_topic_name(report: Reporter, name: str, where: Node, *, what: str) -> None:
    report.error(
        "invalid-topic-name",
        f"{what} {name!r} is not a valid Kafka topic name "
        "(letters, digits, '.', '_' and '-', at most 249 characters)",
        where,
        hint=f"for example {re.sub(r'[^a-zA-Z0-9._-]+', '-', name)[:249]!r}",
    )


def _string_list(report: Reporter, node: Node, *, what: str) -> list[tuple[str, Node]]:
    if node.kind != "seq":
        report.error(
            "wrong-type",
            f"{what} must be a list of strings, got {node.describe()}",
            node,
            hint=f"write it as a list, e.g. [{node.text}]" if node.text else "",
        )
        return []
    out = []
    for item in node.items:
        text = _string(report, item, what=f"each entry of {what}")
        if text is not None:
            out.append((text, item))
    return out


def _port_refs(report: Reporter, node: Node, *, what: str) -> list[tuple[PortRef, Node]]:
    out = []
    for text, item in _string_list(report, node, what=what):
        match = _PORT_REF.match(text)
        if match is None:
            report.error(
                "invalid-port-ref",
                f"{text!r} in {what} is not of the form streamlet.port",
                item,
                hint="name a port as <streamlet>.<port>, e.g. scorer.in",
            )
            continue
        out.append((PortRef(match[1], match[2]), item))
    return out


def _string_map(report: Reporter, node: Node, *, what: str) -> dict[str, str]:
    """A config mapping: Kafka wants strings, so scalars are written as Kafka spells them."""
    if node.kind != "map":
        report.error("wrong-type", f"{what} must be a mapping, got {node.describe()}", node)
        return {}
    out = {}
    for text, _, value in node.fields():
        if value.kind != "scalar" or value.value is None:
            report.error(
                "wrong-type", f"{what}.{text} must be a string, got {value.describe()}", value
            )
            continue
        raw = value.value
        out[text] = str(raw).lower() if isinstance(raw, bool) else str(raw)
    return out


def _config_nodes(report: Reporter, node: Node, *, what: str) -> dict[str, tuple[Node, Node]]:
    if node.kind != "map":
        report.error("wrong-type", f"{what} must be a mapping, got {node.describe()}", node)
        return {}
    return {text: (key, value) for text, key, value in node.fields()}


def _dns_hint(name: str) -> str:
    fixed = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    return f"for example {fixed!r}" if fixed and fixed != name else ""
