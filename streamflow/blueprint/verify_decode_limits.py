"""A streamlet's ``decode_limits:``: what one record may declare once decoded.

The limits themselves, and why they exist, are in :mod:`streamflow.schema.bounds`.
Sizes are bytes, written as a number or a Kubernetes-style quantity (``64Mi``),
so they read like the ``resources:`` next to them::

    decode_limits: {max_items: 100000, max_record_bytes: 16Mi, max_batch_bytes: 128Mi}
"""

from __future__ import annotations

from streamflow.blueprint.report import Reporter, did_you_mean
from streamflow.blueprint.verify_resources import quantity_value
from streamflow.blueprint.yamlload import Node
from streamflow.schema import fields
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits

__all__ = ["DECODE_LIMIT_FIELDS", "read_decode_limits"]

DECODE_LIMIT_FIELDS = fields.blueprint_keys(DecodeLimits)
_EXAMPLE = "for example {max_items: 100000, max_record_bytes: 16Mi, max_batch_bytes: 128Mi}"


def read_decode_limits(report: Reporter, node: Node, *, streamlet: str) -> DecodeLimits | None:
    """The limits under ``decode_limits:`` (unset ones keep their defaults); None when wrong."""
    what = f"{streamlet}.decode_limits"
    if node.kind != "map":
        report.error(
            "wrong-type", f"{what} must be a mapping, got {node.describe()}", node, hint=_EXAMPLE
        )
        return None
    values = DEFAULT_LIMITS.to_dict()
    before = len(report.problems)
    for text, key, value in node.fields():
        if text not in DECODE_LIMIT_FIELDS:
            report.error(
                "unknown-field",
                f"unknown field {text!r} in {what}",
                key,
                hint=did_you_mean(text, DECODE_LIMIT_FIELDS)
                or f"the fields are: {', '.join(DECODE_LIMIT_FIELDS)}",
            )
            continue
        number = _whole(value, sizes=text != "max_items")
        if number is None or number < 1:
            report.error(
                "invalid-decode-limit",
                f"{what}.{text} must be a whole number of at least 1"
                + (" (bytes, or a quantity such as 64Mi)" if text != "max_items" else "")
                + f", got {value.describe()}",
                value,
                hint=_EXAMPLE,
            )
            continue
        values[text] = number
    if len(report.problems) > before:
        return None
    try:
        return DecodeLimits(**values)
    except ValueError as exc:
        report.error("invalid-decode-limit", f"{what}: {exc}", node, hint=_EXAMPLE)
        return None


def _whole(node: Node, *, sizes: bool) -> int | None:
    value = node.value if node.kind == "scalar" else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if sizes and isinstance(value, str):
        number = quantity_value(value)
        if number is not None and number == int(number):
            return int(number)
    return None
