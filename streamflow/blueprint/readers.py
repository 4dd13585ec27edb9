"""Readers of single blueprint values, for the structure pass (:mod:`.structure`).

Each reads one YAML node as the blueprint format wants it (a string, a count, one
of a set of words, a list of ``streamlet.port`` references, a Kafka config map) and,
when it is not, reports a located problem with a hint and returns None or the
default, so the pass goes on and finds more.
"""

from __future__ import annotations

import enum
import re
from typing import TypeVar

from streamflow.api.params import parse_duration
from streamflow.blueprint.model import AT_LEAST_ONCE, GUARANTEES, PortRef
from streamflow.blueprint.report import Reporter, closest, did_you_mean
from streamflow.blueprint.yamlload import Node

__all__ = [
    "DNS_RULES",
    "bad_topic_name",
    "boolean",
    "choice",
    "config_nodes",
    "count",
    "dns_hint",
    "fields",
    "guarantee",
    "is_topic_name",
    "port_refs",
    "replicas",
    "stall_after",
    "string",
    "string_list",
    "string_map",
    "topic_name",
]

DNS_RULES = "lowercase letters, digits and '-', at most 63, starting and ending alphanumeric"
_STALL_AFTER_MIN_S = 5.0
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PORT_REF = re.compile(r"^([^.\s]+)\.([^.\s]+)$")


def is_topic_name(name: str) -> bool:
    """Kafka's rule: ``[a-zA-Z0-9._-]``, at most 249 characters, not ``.`` or ``..``."""
    return bool(_TOPIC_NAME.match(name)) and name not in (".", "..")


def fields(
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


def string(report: Reporter, node: Node, *, what: str) -> str | None:
    if node.kind == "scalar" and isinstance(node.value, str):
        return node.value
    report.error("wrong-type", f"{what} must be a string, got {node.describe()}", node)
    return None


def boolean(report: Reporter, node: Node, *, what: str) -> bool | None:
    if node.kind == "scalar" and isinstance(node.value, bool):
        return node.value
    report.error("wrong-type", f"{what} must be true or false, got {node.describe()}", node)
    return None


def count(report: Reporter, node: Node, *, what: str, code: str, minimum: int) -> int | None:
    value = node.value if node.kind == "scalar" else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    report.error(code, f"{what} must be a whole number >= {minimum}, got {node.describe()}", node)
    return None


def replicas(report: Reporter, node: Node, *, default: int) -> int:
    found = count(report, node, what="replicas", code="invalid-replicas", minimum=0)
    return default if found is None else found


_Choice = TypeVar("_Choice", bound=enum.StrEnum)


def choice(
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


def stall_after(report: Reporter, node: Node, *, streamlet: str) -> float | None:
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


def guarantee(report: Reporter, node: Node) -> str:
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


def topic_name(report: Reporter, node: Node, *, what: str) -> str | None:
    name = string(report, node, what=what)
    if name is not None and not is_topic_name(name):
        bad_topic_name(report, name, node, what=what)
    return name


def bad_topic_name(report: Reporter, name: str, where: Node, *, what: str) -> None:
    report.error(
        "invalid-topic-name",
        f"{what} {name!r} is not a valid Kafka topic name "
        "(letters, digits, '.', '_' and '-', at most 249 characters)",
        where,
        hint=f"for example {re.sub(r'[^a-zA-Z0-9._-]+', '-', name)[:249]!r}",
    )


def string_list(report: Reporter, node: Node, *, what: str) -> list[tuple[str, Node]]:
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
        text = string(report, item, what=f"each entry of {what}")
        if text is not None:
            out.append((text, item))
    return out


def port_refs(report: Reporter, node: Node, *, what: str) -> list[tuple[PortRef, Node]]:
    out = []
    for text, item in string_list(report, node, what=what):
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


def string_map(report: Reporter, node: Node, *, what: str) -> dict[str, str]:
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


def config_nodes(report: Reporter, node: Node, *, what: str) -> dict[str, tuple[Node, Node]]:
    if node.kind != "map":
        report.error("wrong-type", f"{what} must be a mapping, got {node.describe()}", node)
        return {}
    return {text: (key, value) for text, key, value in node.fields()}


def dns_hint(name: str) -> str:
    fixed = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    return f"for example {fixed!r}" if fixed and fixed != name else ""
