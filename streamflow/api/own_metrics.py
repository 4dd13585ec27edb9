"""Metrics of a streamlet's own (a drift verdict, a model loaded), reported through its Context.

The runtime's metrics describe records and batches; some facts only the
streamlet's logic knows, and an alert needs them as numbers, not log lines.
A streamlet reports them with ``context.set_gauge`` and ``context.count``;
what it reported waits in ``context.metrics`` until the runtime
exports it (after each batch and each control record) as
``streamflow_<name>`` with the replica's ``app``, ``streamlet`` and
``replica`` labels plus the ones the streamlet gave. Under the testkit the
values stay there (gauges hold the last value, counts add up), so a unit test
reads them without a registry.

A metric keeps one kind and one set of label names for the life of the
replica, as Prometheus requires; breaking that raises here, in the
streamlet's own call, rather than later inside the runtime's export.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["OwnMetric", "report"]

RESERVED_LABELS = frozenset({"app", "streamlet", "replica"})
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass
class OwnMetric:
    """A metric a streamlet reported: kind, help text, label names, values not yet exported."""

    kind: Literal["gauge", "counter"]
    description: str
    label_names: tuple[str, ...]
    values: dict[tuple[str, ...], float] = field(default_factory=dict)


def report(
    metrics: MutableMapping[str, OwnMetric],
    name: str,
    value: float,
    *,
    kind: Literal["gauge", "counter"],
    description: str,
    labels: Mapping[str, str] | None,
) -> None:
    """Record ``value`` (a gauge's new value, or a count to add) under ``name`` and ``labels``."""
    labels = dict(sorted((labels or {}).items()))
    if not _NAME.match(name) or name.endswith("_total"):
        raise ValueError(
            f"metric name {name!r}: use lower-case letters, digits and _ "
            "(it is exported as streamflow_<name>; a counter gets _total added)"
        )
    for label in labels:
        if label in RESERVED_LABELS or not _NAME.match(label):
            raise ValueError(
                f"metric {name!r}: label {label!r} is not allowed "
                f"(lower-case letters, digits and _; {sorted(RESERVED_LABELS)} are the runtime's)"
            )
    metric = metrics.setdefault(name, OwnMetric(kind, description, tuple(labels)))
    if (metric.kind, metric.label_names) != (kind, tuple(labels)):
        raise ValueError(
            f"metric {name!r} was first reported as a {metric.kind} with labels "
            f"{list(metric.label_names)}; it cannot become a {kind} with labels {list(labels)}"
        )
    key = tuple(labels.values())
    metric.values[key] = value + (metric.values.get(key, 0.0) if kind == "counter" else 0.0)
