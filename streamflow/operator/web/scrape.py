"""Reading the replicas' ``/metrics``: the counters the web view turns into rates.

The web view makes no store of its own: every number it shows comes from the
Prometheus text each replica already serves (the same one Prometheus scrapes),
read over HTTP in parallel with short timeouts. :func:`parse` is pure, so the
snapshot's arithmetic is unit-tested on plain text; :func:`scrape_all` is the
only part that touches the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from streamflow.operator.targets import writer_schemas as writers

__all__ = ["ReplicaMetrics", "parse", "scrape_all"]

_IN = "streamflow_records_in"
_OUT = "streamflow_records_out"
_DLQ = "streamflow_records_dlq"
_ERRORS = "streamflow_errors"
_LAG = "streamflow_consumer_lag"
_STATE = "streamflow_control_state"


@dataclass(frozen=True)
class ReplicaMetrics:
    """One replica's counters (per port), summed lag, control state (``model`` -> tag), and
    its dead letters of writer schemas it cannot read."""

    records_in: Mapping[str, float] = field(default_factory=dict)
    records_out: Mapping[str, float] = field(default_factory=dict)
    dead_letters: Mapping[str, float] = field(default_factory=dict)
    errors: float = 0.0
    lag: int | None = None
    state: Mapping[str, str] = field(default_factory=dict)
    writer_schemas: tuple[writers.WriterSchemaDeadLetters, ...] = ()


def parse(text: str) -> ReplicaMetrics:
    """The streamflow metrics in Prometheus text; empty when the text does not parse."""
    counters: dict[str, dict[str, float]] = {_IN: {}, _OUT: {}, _DLQ: {}}
    errors = 0.0
    lag: int | None = None
    state: dict[str, str] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return ReplicaMetrics()
    for family in families:
        for sample in family.samples:
            # a counter's samples are <name>_total and <name>_created; only the total counts
            base = sample.name.removesuffix("_total")
            if base in counters and sample.name.endswith("_total"):
                port = sample.labels.get("port", "")
                counters[base][port] = counters[base].get(port, 0.0) + sample.value
            elif base == _ERRORS and sample.name.endswith("_total"):
                errors += sample.value
            elif sample.name == _LAG:
                lag = (lag or 0) + int(sample.value)
            elif sample.name == _STATE and sample.value == 1:
                state[sample.labels.get("name", "")] = sample.labels.get("value", "")
    return ReplicaMetrics(
        records_in=counters[_IN],
        records_out=counters[_OUT],
        dead_letters=counters[_DLQ],
        errors=errors,
        lag=lag,
        state=state,
        writer_schemas=writers.read(families),
    )


def scrape_all(
    endpoints: Mapping[str, str], *, timeout: float = 1.0
) -> dict[str, ReplicaMetrics | None]:
    """``{replica: metrics}`` for each ``{replica: health base URL}``; None: no answer."""
    if not endpoints:
        return {}
    names = list(endpoints)
    with (
        httpx.Client(timeout=timeout) as client,
        ThreadPoolExecutor(max_workers=min(16, len(names))) as pool,
    ):
        found = pool.map(lambda name: _scrape(client, endpoints[name]), names)
        return dict(zip(names, found, strict=True))


def _scrape(client: httpx.Client, base: str) -> ReplicaMetrics | None:
    try:
        response = client.get(f"{base.rstrip('/')}/metrics")
    except httpx.HTTPError:
        return None
    return parse(response.text) if response.status_code == 200 else None
