"""One snapshot of a running application: its graph and every live number, as plain JSON.

This is the whole of what the page draws, built by one pure function from
what already exists: the blueprint's graph, the target's status, two readings
of the replicas' counters, and the latest records the topic reader found.
Rates are the difference of two readings over the time between them, as
Prometheus' ``rate()`` computes them: a counter that went down means the
replica restarted, so its new value is all that was counted since. Keeping
this free of I/O is what lets the arithmetic be tested on plain values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamflow.blueprint.graph import Edge, Graph
from streamflow.operator import targets
from streamflow.operator.targets import writer_schemas as writers
from streamflow.operator.web.rollouts import DECISION, latest_rollout
from streamflow.operator.web.scrape import ReplicaMetrics

__all__ = ["DRIFT_REPORT", "EXPLANATION", "Reading", "Records", "build", "rates"]

DRIFT_REPORT = "streamflow.ml.DriftReport"
EXPLANATION = "streamflow.ml.Explanation"
MODEL_DESCRIPTOR = "streamflow.ml.ModelDescriptor"
_TOP_ATTRIBUTIONS = 6


@dataclass(frozen=True)
class Reading:
    """The replicas' metrics at one moment (``at``: monotonic seconds); None: no answer."""

    at: float
    replicas: Mapping[str, ReplicaMetrics | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Records:
    """What the topic reader last found: DriftReports, Explanations and RolloutDecisions, by
    producing streamlet."""

    drift: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    explanations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    decisions: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    problem: str | None = None  # why the topics could not be read, if they could not


@dataclass(frozen=True)
class PortRates:
    """Records/s per replica and port, in and out (and to the dead-letter topic)."""

    records_in: Mapping[tuple[str, str], float] = field(default_factory=dict)
    records_out: Mapping[tuple[str, str], float] = field(default_factory=dict)
    dead_letters: Mapping[tuple[str, str], float] = field(default_factory=dict)


def rates(older: Reading | None, newer: Reading) -> PortRates:
    """Per ``(replica, port)`` rates between two readings; empty for the first reading."""
    if older is None or newer.at <= older.at:
        return PortRates()
    seconds = newer.at - older.at
    found: dict[str, dict[tuple[str, str], float]] = {"in": {}, "out": {}, "dlq": {}}
    for replica, now in newer.replicas.items():
        before = older.replicas.get(replica)
        if now is None or before is None:
            continue
        for kind, after_counts, before_counts in (
            ("in", now.records_in, before.records_in),
            ("out", now.records_out, before.records_out),
            ("dlq", now.dead_letters, before.dead_letters),
        ):
            for port, value in after_counts.items():
                previous = before_counts.get(port, 0.0)
                delta = value - previous if value >= previous else value  # a restart
                found[kind][(replica, port)] = delta / seconds
    return PortRates(found["in"], found["out"], found["dlq"])


def build(
    *,
    graph: Graph,
    status: targets.AppStatus,
    newer: Reading,
    older: Reading | None,
    records: Records,
    formats: Mapping[str, str],
    dlq_topics: Mapping[str, str],
    now: float,
) -> dict[str, Any]:
    """The JSON snapshot the page draws (``now``: epoch seconds, for "how long ago")."""
    per_port = rates(older, newer)
    by_name = {s.name: s for s in status.streamlets}
    streamlets = [
        _streamlet(
            node.name,
            node.class_path,
            node.shape,
            graph=graph,
            status=by_name.get(node.name),
            reading=newer,
            per_port=per_port,
            records=records,
            dlq_topic=dlq_topics.get(node.name, ""),
        )
        for node in graph.streamlets
    ]
    edges = [_edge(e, by_name.get(e.streamlet), per_port) for e in graph.edges]
    topics = [
        {
            "name": t.name,
            "partitions": t.partitions,
            "replication": t.replication,
            "managed": t.managed,
            "compacted": t.compacted,
            "format": formats.get(t.name, "avro"),
            "schemas": sorted({e.schema for e in graph.edges if e.topic == t.name}),
            "rate_in": _sum_known(x["rate"] for x in edges if _on(x, t.name, "produce")),
            "rate_out": _sum_known(x["rate"] for x in edges if _on(x, t.name, "consume")),
        }
        for t in graph.topics
    ]
    return {
        "app": graph.app,
        "target": status.target,
        "phase": status.phase,
        "message": status.message,
        "kafka": status.kafka,
        "time": now,
        "rates_known": older is not None,
        "streamlets": streamlets,
        "topics": topics,
        "edges": edges,
        "drift": _latest_drift(records),
        "explanation": _latest_explanation(records),
        "rollout": latest_rollout(records.decisions, _epoch),
        "records_problem": records.problem,
    }


def _streamlet(
    name: str,
    class_path: str,
    shape: str,
    *,
    graph: Graph,
    status: targets.StreamletStatus | None,
    reading: Reading,
    per_port: PortRates,
    records: Records,
    dlq_topic: str,
) -> dict[str, Any]:
    replicas = status.replicas if status is not None else ()
    names = {r.name for r in replicas}
    produced = {e.schema for e in graph.edges if e.streamlet == name and e.direction == "produce"}
    followed = {e.schema for e in graph.edges if e.streamlet == name and e.control}
    return {
        "name": name,
        "class": class_path,
        "shape": shape,
        "roles": sorted(
            role
            for role, present in (
                ("drift", DRIFT_REPORT in produced),
                ("explain", EXPLANATION in produced),
                # a rollout controller follows the model topic too, but serves no model
                ("model", MODEL_DESCRIPTOR in followed and DECISION not in produced),
                ("rollout", DECISION in produced),
            )
            if present
        ),
        "desired": status.desired if status else 0,
        "ready": status.ready if status else 0,
        "running": status.running if status else 0,
        "restarts": status.restarts if status else 0,
        "lag": status.lag if status else None,
        "rate_in": _sum_known(v for (r, _), v in per_port.records_in.items() if r in names),
        "rate_out": _sum_known(v for (r, _), v in per_port.records_out.items() if r in names),
        "records_in": _total(reading, names, "records_in"),
        "records_out": _total(reading, names, "records_out"),
        "errors": sum((m.errors for m in _metrics(reading, names)), 0.0),
        "dead_letters": {
            "count": int(_total(reading, names, "dead_letters") or 0),
            "rate": _sum_known(v for (r, _), v in per_port.dead_letters.items() if r in names),
            "topic": dlq_topic,
            "writer_schemas": _writer_schemas(reading, names),
        },
        "models": sorted({m for m in (_model_of(r, reading) for r in replicas) if m}),
        "replicas": [_replica(r, reading, per_port) for r in replicas],
        "autoscale": dataclasses.asdict(status.autoscale) if status and status.autoscale else None,
        "drift": [_drift(r) for r in records.drift.get(name, ())],
        "explanation": _explanation(records.explanations[name])
        if name in records.explanations
        else None,
    }


def _replica(
    replica: targets.ReplicaStatus, reading: Reading, per_port: PortRates
) -> dict[str, Any]:
    metrics = reading.replicas.get(replica.name)
    return {
        "name": replica.name,
        "index": replica.index,
        "running": replica.running,
        "ready": replica.ready,
        "restarts": replica.restarts,
        "reasons": list(replica.reasons),
        "lag": metrics.lag if metrics and metrics.lag is not None else replica.lag,
        "model": _model_of(replica, reading),
        "last_exit": replica.last_exit,
        "rate_in": _sum_known(v for (r, _), v in per_port.records_in.items() if r == replica.name),
        "rate_out": _sum_known(
            v for (r, _), v in per_port.records_out.items() if r == replica.name
        ),
    }


def _writer_schemas(reading: Reading, names: set[str]) -> list[dict[str, Any]]:
    """The dead letters of writer schemas the replicas cannot read, summed, each with its line."""
    found = writers.summed(m.writer_schemas for m in _metrics(reading, names))
    return [{**dataclasses.asdict(e), "text": e.describe()} for e in found]


def _model_of(replica: targets.ReplicaStatus, reading: Reading) -> str | None:
    """What the replica serves: its own metrics' word first (newest), else the target's."""
    metrics = reading.replicas.get(replica.name)
    if metrics is not None and metrics.state.get("model"):
        return metrics.state["model"]
    return replica.model


def _edge(
    edge: Edge, status: targets.StreamletStatus | None, per_port: PortRates
) -> dict[str, Any]:
    names = {r.name for r in status.replicas} if status else set()
    counts = per_port.records_out if edge.direction == "produce" else per_port.records_in
    return {
        "streamlet": edge.streamlet,
        "port": edge.port,
        "topic": edge.topic,
        "schema": edge.schema,
        "direction": edge.direction,
        "control": edge.control,
        "rate": _sum_known(v for (r, p), v in counts.items() if r in names and p == edge.port),
    }


def _on(edge: Mapping[str, Any], topic: str, direction: str) -> bool:
    return bool(edge["topic"] == topic and edge["direction"] == direction)


def _metrics(reading: Reading, names: set[str]) -> list[ReplicaMetrics]:
    return [m for n, m in reading.replicas.items() if n in names and m is not None]


def _total(reading: Reading, names: set[str], kind: str) -> float | None:
    found = _metrics(reading, names)
    if not found:
        return None
    return sum(sum(getattr(m, kind).values()) for m in found)


def _sum_known(values: Any) -> float | None:
    """The sum of what was measured, or None when nothing was (unknown is not zero)."""
    found = [v for v in values if v is not None]
    return sum(found) if found else None


# -- records ------------------------------------------------------------------------------------


def _drift(report: Mapping[str, Any]) -> dict[str, Any]:
    window = report.get("window") or {}
    return {
        "detector": report.get("detector", ""),
        "source": report.get("source", ""),
        "drifted": bool(report.get("drifted")),
        "severity": str(report.get("severity", "")),
        "model": report.get("model", ""),
        "model_version": report.get("model_version", 0),
        "window": window.get("index"),
        "records": window.get("records"),
        "message": report.get("message", ""),
        # a feature may fail several tests (KS and PSI): named once, in the report's order
        "features": _once(f.get("feature", "") for f in report.get("features", ()) if f["drifted"]),
        "signals": _once(s.get("signal", "") for s in report.get("signals", ()) if s["drifted"]),
        "time": _epoch(report.get("time")),
    }


def _once(names: Any) -> list[str]:
    return list(dict.fromkeys(names))


def _explanation(record: Mapping[str, Any]) -> dict[str, Any]:
    prediction = list(record.get("prediction") or ())
    target = int(record.get("target", 0))
    attributions = sorted(
        record.get("attributions") or (), key=lambda a: -abs(float(a.get("attribution", 0.0)))
    )
    return {
        "key": record.get("key"),
        "model": record.get("model", ""),
        "model_version": record.get("model_version", 0),
        "method": str(record.get("method", "")),
        "reason": str(record.get("reason", "")),
        "target": target,
        "confidence": prediction[target] if 0 <= target < len(prediction) else None,
        "attributions": [
            {
                "feature": a.get("feature", ""),
                "value": a.get("value"),
                "attribution": a.get("attribution"),
            }
            for a in attributions[:_TOP_ATTRIBUTIONS]
        ],
        "features": len(attributions),
        "time": _epoch(record.get("time")),
    }


def _latest_drift(records: Records) -> dict[str, Any] | None:
    """The app's current drift verdict: drifted if any source's newest report says so."""
    reports = [(s, _drift(r)) for s, found in records.drift.items() for r in found]
    if not reports:
        return None
    newest = max(reports, key=lambda pair: pair[1]["time"] or 0)
    drifted = [r for _, r in reports if r["drifted"]]
    return {
        "streamlet": newest[0],
        "drifted": bool(drifted),
        "verdict": "drift" if drifted else "no drift",
        "severity": max((r["severity"] for r in drifted), key=_severity, default="NONE"),
        "reports": [r for _, r in reports],
        "time": newest[1]["time"],
    }


def _latest_explanation(records: Records) -> dict[str, Any] | None:
    found = [(s, _explanation(r)) for s, r in records.explanations.items()]
    if not found:
        return None
    streamlet, newest = max(found, key=lambda pair: pair[1]["time"] or 0)
    return {"streamlet": streamlet, **newest}


def _severity(name: str) -> int:
    order = ("NONE", "LOW", "MEDIUM", "HIGH")
    return order.index(name) if name in order else 0


def _epoch(value: Any) -> float | None:
    """A timestamp-millis field as epoch seconds (fastavro gives a datetime)."""
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    if isinstance(value, int | float):
        return float(value) / 1000.0
    return None
