"""``resources:`` of a streamlet: the CPU and memory its replicas ask for and may use.

Written like a Kubernetes container's resources (``{requests: {cpu: 250m,
memory: 512Mi}, limits: {memory: 1Gi}}``) and checked here, when the blueprint
is verified, rather than by the API server at deploy time: a quantity the
cluster would refuse (``1GB``, ``-1``, ``lots``) or a request above its limit
is reported with its position, like any other mistake in a blueprint. The
local target runs processes and ignores the field; the Kubernetes target puts
it on the streamlet's pods.
"""

from __future__ import annotations

import re
from decimal import Decimal

from streamflow.blueprint.model import KINDS, QUANTITY_PATTERN, RESOURCES
from streamflow.blueprint.report import Reporter, did_you_mean
from streamflow.blueprint.yamlload import Node

__all__ = [
    "KINDS",
    "QUANTITY_PATTERN",
    "RESOURCES",
    "quantity_value",
    "read_resources",
]

_QUANTITY = re.compile(QUANTITY_PATTERN)
_SUFFIXES = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}
_EXAMPLE = "for example {requests: {cpu: 250m, memory: 512Mi}, limits: {memory: 1Gi}}"


def quantity_value(text: str) -> Decimal | None:
    """The number a quantity stands for (``1Gi`` -> 1073741824), or None if it is not one."""
    found = _QUANTITY.match(text)
    if found is None:
        return None
    number, _, suffix = found.groups()
    return Decimal(number) * _SUFFIXES[suffix or ""]


def read_resources(
    report: Reporter, node: Node, *, streamlet: str
) -> dict[str, dict[str, str]] | None:
    """The requests and limits under ``resources:``; None (after reporting) when wrong."""
    what = f"{streamlet}.resources"
    if node.kind != "map":
        report.error(
            "wrong-type", f"{what} must be a mapping, got {node.describe()}", node, hint=_EXAMPLE
        )
        return None
    before = len(report.problems)
    out: dict[str, dict[str, str]] = {}
    nodes: dict[tuple[str, str], Node] = {}
    for kind, key, value in node.fields():
        if kind not in KINDS:
            report.error(
                "unknown-field",
                f"unknown field {kind!r} in {what}",
                key,
                hint=did_you_mean(kind, KINDS) or "the fields are: requests, limits",
            )
            continue
        if value.kind != "map":
            report.error(
                "wrong-type",
                f"{what}.{kind} must be a mapping, got {value.describe()}",
                value,
                hint=_EXAMPLE,
            )
            continue
        for resource, rkey, amount in value.fields():
            where = f"{what}.{kind}.{resource}"
            if resource not in RESOURCES:
                report.error(
                    "unknown-field",
                    f"unknown resource {resource!r} in {what}.{kind}",
                    rkey,
                    hint=did_you_mean(resource, RESOURCES)
                    or f"the resources are: {', '.join(RESOURCES)}",
                )
                continue
            text = _quantity_text(amount)
            if text is None or quantity_value(text) is None:
                report.error(
                    "invalid-resources",
                    f"{where} is not a Kubernetes quantity: {amount.describe()}",
                    amount,
                    hint="cpu in cores or millicores (0.5, 500m), memory in bytes with a "
                    "suffix (512Mi, 1Gi, 1G); Mi and Gi are powers of 1024",
                )
                continue
            out.setdefault(kind, {})[resource] = text
            nodes[(kind, resource)] = amount
    _check_requests_within_limits(report, out, nodes, what=what)
    return None if len(report.problems) > before else out


def _quantity_text(node: Node) -> str | None:
    """A scalar as written: ``2`` and ``0.5`` are quantities too; ``true`` is not."""
    value = node.value if node.kind == "scalar" else None
    if isinstance(value, bool) or value is None:
        return None
    return str(value).strip()


def _check_requests_within_limits(
    report: Reporter,
    out: dict[str, dict[str, str]],
    nodes: dict[tuple[str, str], Node],
    *,
    what: str,
) -> None:
    """The API server refuses a pod whose request is above its limit: say so now."""
    for resource, limit in (out.get("limits") or {}).items():
        request = (out.get("requests") or {}).get(resource)
        if request is None:
            continue
        if (quantity_value(request) or 0) > (quantity_value(limit) or 0):
            report.error(
                "invalid-resources",
                f"{what}: the {resource} request ({request}) is above its limit ({limit})",
                nodes[("requests", resource)],
                hint="a request is what a replica is guaranteed, the limit the most it may "
                "use: raise the limit or lower the request",
            )
