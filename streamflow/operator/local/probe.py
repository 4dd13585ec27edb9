"""Asking replicas how they are: ``/readyz`` and ``/metrics`` of each health port.

``status`` needs what only a replica knows: whether it is ready (partitions
assigned, control inlets caught up, a model loaded), how far behind it is, and
which model it serves, and which writer schemas it dead-letters records of
(:mod:`~streamflow.operator.targets.writer_schemas`). Every replica already
serves these over HTTP, the same endpoints a Kubernetes probe and Prometheus
read, so the local target reads them too rather than inventing a side channel.
Replicas are asked in parallel with short timeouts, so one that hangs slows
``status`` by at most that.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from streamflow.operator.targets import writer_schemas as writers

__all__ = ["Liveness", "Probe", "liveness", "probe", "probe_all"]

_LAG = "streamflow_consumer_lag"
_STATE = "streamflow_control_state"


@dataclass(frozen=True)
class Probe:
    """What one replica said; ``answered`` False when it did not answer at all."""

    answered: bool = False
    ready: bool = False
    reasons: tuple[str, ...] = ()
    lag: int | None = None
    state: dict[str, str] = field(default_factory=dict)  # control state: name -> value
    live: bool | None = None  # /healthz; None when it did not answer
    not_live: str = ""  # why not, in the replica's words
    writer_schemas: tuple[writers.WriterSchemaDeadLetters, ...] = ()


@dataclass(frozen=True)
class Liveness:
    """What ``/healthz`` said: ``alive`` None when the replica did not answer."""

    alive: bool | None
    reason: str = ""


def liveness(port: int, *, host: str = "127.0.0.1", timeout: float = 2.0) -> Liveness:
    import httpx  # where a replica is asked: a CLI that only lists or reads files never is

    try:
        answer = httpx.get(f"http://{host}:{port}/healthz", timeout=timeout)
    except httpx.HTTPError as exc:
        return Liveness(None, f"/healthz did not answer: {type(exc).__name__}")
    try:
        body = answer.json()
    except ValueError:
        body = {}
    reason = str(body.get("reason", "")) if isinstance(body, dict) else ""
    if answer.status_code == 200:
        return Liveness(True)
    return Liveness(False, reason or f"/healthz answered {answer.status_code}")


def probe(port: int, *, host: str = "127.0.0.1", timeout: float = 1.0) -> Probe:
    import httpx  # as in liveness

    base = f"http://{host}:{port}"
    try:
        with httpx.Client(timeout=timeout) as client:
            ready = client.get(f"{base}/readyz")
            metrics = client.get(f"{base}/metrics")
            healthz = client.get(f"{base}/healthz")
    except httpx.HTTPError:
        return Probe()
    try:
        body = ready.json()
    except ValueError:
        body = {}
    reasons = tuple(str(r) for r in body.get("reasons", ())) if isinstance(body, dict) else ()
    lag, state, unreadable = _read_metrics(metrics.text) if metrics.status_code == 200 else _NONE
    try:
        health = healthz.json()
    except ValueError:
        health = {}
    return Probe(
        answered=True,
        ready=ready.status_code == 200,
        reasons=reasons,
        lag=lag,
        state=state,
        live=healthz.status_code == 200,
        not_live=str(health.get("reason", "")) if isinstance(health, dict) else "",
        writer_schemas=unreadable,
    )


def probe_all(ports: Iterable[int], *, timeout: float = 1.0) -> dict[int, Probe]:
    wanted = list(dict.fromkeys(ports))
    if not wanted:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
        found = pool.map(lambda port: probe(port, timeout=timeout), wanted)
        return dict(zip(wanted, found, strict=True))


_Read = tuple[int | None, dict[str, str], tuple[writers.WriterSchemaDeadLetters, ...]]
_NONE: _Read = (None, {}, ())


def _read_metrics(text: str) -> _Read:
    """The summed consumer lag (None when not reported yet), the current control state,
    and the dead letters of writer schemas the replica cannot read."""
    lag: int | None = None
    state: dict[str, str] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None, {}, ()
    for family in families:
        for sample in family.samples:
            if sample.name == _LAG:
                lag = (lag or 0) + int(sample.value)
            elif sample.name == _STATE and sample.value == 1:
                state[sample.labels.get("name", "")] = sample.labels.get("value", "")
    return lag, state, writers.read(families)
