"""``autoscale:`` of a streamlet: reading it, and checking it against the topics.

Reading happens in the first pass (:func:`read_autoscale`, called for the
field by the structure pass), checking in a later one (:func:`check_autoscale`)
once the classes are known: lag is measured on a streamlet's *data* inlets,
so a streamlet without one cannot be autoscaled, and replicas beyond the
input's partitions would sit idle, so such a ``max`` earns a warning. A
wrong field is reported and the streamlet is then left without autoscaling,
so the later passes still run.
"""

from __future__ import annotations

from typing import Any

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.params import parse_duration
from streamflow.blueprint.model import AutoscaleSpec
from streamflow.blueprint.report import Reporter, did_you_mean
from streamflow.blueprint.yamlload import Node
from streamflow.schema import fields

__all__ = ["AUTOSCALE_FIELDS", "check_autoscale", "read_autoscale"]

AUTOSCALE_FIELDS = fields.blueprint_keys(AutoscaleSpec)


def read_autoscale(report: Reporter, node: Node, *, streamlet: str) -> AutoscaleSpec | None:
    """The spec written under ``autoscale:``; None (after reporting) when it is wrong."""
    what = f"{streamlet}.autoscale"
    if node.kind != "map":
        report.error(
            "wrong-type",
            f"{what} must be a mapping, got {node.describe()}",
            node,
            hint="for example {min: 1, max: 8, target_lag: 5000, scale_down_after: 2m}",
        )
        return None
    before = len(report.problems)
    values: dict[str, Any] = {}
    for text, key, value in node.fields():
        if text not in AUTOSCALE_FIELDS:
            report.error(
                "unknown-field",
                f"unknown field {text!r} in {what}",
                key,
                hint=did_you_mean(text, AUTOSCALE_FIELDS)
                or f"the fields are: {', '.join(AUTOSCALE_FIELDS)}",
            )
        elif text in ("min", "max", "target_lag"):
            values[text] = _whole(report, value, what=f"{what}.{text}", minimum=int(text != "min"))
        elif text in ("scale_up_after", "scale_down_after"):
            values[text] = _seconds(report, value, what=f"{what}.{text}")
        elif isinstance(value.value, bool) and value.kind == "scalar":
            values[text] = value.value
        else:
            report.error(
                "wrong-type", f"{what}.keda must be true or false, got {value.describe()}", value
            )
    if len(report.problems) > before:
        return None
    spec = AutoscaleSpec(**values)
    if spec.min > spec.max:
        report.error(
            "invalid-autoscale",
            f"{what}: min ({spec.min}) is above max ({spec.max})",
            node.get("min") or node,
            hint="min is the fewest replicas, max the most",
        )
        return None
    return spec


def check_autoscale(
    streamlets: dict[str, Any],
    *,
    topics: dict[str, Any],
    descriptors: dict[str, StreamletDescriptor],
    report: Reporter,
) -> None:
    """Autoscaled streamlets: a data inlet to measure, replicas within bounds, max vs partitions.

    ``streamlets`` and ``topics`` are the structure pass's drafts.
    """
    for name, draft in streamlets.items():
        spec: AutoscaleSpec | None = draft.autoscale
        descriptor = descriptors.get(name)
        if spec is None or descriptor is None:
            continue
        data_inlets = [p.name for p in descriptor.inlets]  # control inlets are apart
        where = draft.autoscale_node
        if not data_inlets:
            report.error(
                "autoscale-without-input",
                f"{name} cannot be autoscaled: it has no data inlet, and autoscaling follows "
                "the lag of a streamlet's input",
                where,
                hint="remove autoscale: and set replicas: instead",
            )
            continue
        if draft.replicas_node is not None and not spec.min <= draft.replicas <= spec.max:
            report.error(
                "invalid-autoscale",
                f"{name}: replicas ({draft.replicas}) is outside autoscale's bounds "
                f"[{spec.min}, {spec.max}]",
                draft.replicas_node,
                hint="with autoscale:, replicas is only the count to start with; "
                "or leave it out to start at min",
            )
        partitions = [
            topic.partitions
            for topic in topics.values()
            for use in topic.consumers
            if use.ref.streamlet == name and use.ref.port in data_inlets
        ]
        if partitions and spec.max > max(partitions):
            report.warning(
                "autoscale-above-partitions",
                f"{name}: autoscale's max ({spec.max}) is above the partitions of its input "
                f"({max(partitions)}); it will not scale past {max(partitions)}",
                where,
                hint="add partitions to the input topic to let it scale further",
            )


def _whole(report: Reporter, node: Node, *, what: str, minimum: int) -> int:
    value = node.value if node.kind == "scalar" else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    report.error(
        "invalid-autoscale",
        f"{what} must be a whole number >= {minimum}, got {node.describe()}",
        node,
    )
    return minimum


def _seconds(report: Reporter, node: Node, *, what: str) -> float:
    try:
        seconds = parse_duration(node.value if node.kind == "scalar" else None).total_seconds()
    except (ValueError, TypeError) as exc:
        report.error(
            "invalid-autoscale",
            f"{what} must be a duration such as 30s or 2m: {exc}",
            node,
        )
        return 0.0
    return seconds
