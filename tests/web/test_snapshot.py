"""The web view's snapshot, from plain inputs: rates, dead letters, models, drift, explanations."""

from __future__ import annotations

import datetime as dt
from typing import Any

from streamflow.blueprint.graph import Edge, Graph, StreamletNode, TopicNode
from streamflow.operator import targets
from streamflow.operator.web import scrape, snapshot

METRICS = """\
# TYPE streamflow_records_in counter
streamflow_records_in_total{{app="a",streamlet="classifier",replica="0",port="in"}} {records_in}
streamflow_records_in_created{{app="a",streamlet="classifier",replica="0",port="in"}} 1.7e9
# TYPE streamflow_records_out counter
streamflow_records_out_total{{app="a",streamlet="classifier",replica="0",port="out"}} {records_out}
# TYPE streamflow_records_dlq counter
streamflow_records_dlq_total{{app="a",streamlet="classifier",replica="0",port="in"}} {dlq}
# TYPE streamflow_errors counter
streamflow_errors_total{{app="a",streamlet="classifier",replica="0",port="in",kind="logic"}} {dlq}
# TYPE streamflow_consumer_lag gauge
streamflow_consumer_lag{{app="a",streamlet="classifier",replica="0",topic="f",partition="0"}} 3
streamflow_consumer_lag{{app="a",streamlet="classifier",replica="0",topic="f",partition="1"}} 4
# TYPE streamflow_control_state gauge
streamflow_control_state{{app="a",streamlet="classifier",replica="0",name="model",\
value="{model}"}} 1
"""

GRAPH = Graph(
    app="a",
    streamlets=(
        StreamletNode("classifier", "m:Classifier", "fan-out", 1),
        StreamletNode("drift", "m:Drift", "fan-out", 1),
    ),
    topics=(
        TopicNode("features", 4, 1, True, False),
        TopicNode("predictions", 4, 1, True, False),
        TopicNode("models", 1, 1, True, True),
        TopicNode("reports", 1, 1, True, False),
    ),
    edges=(
        Edge("classifier", "in", "features", "ex.Features", "consume"),
        Edge("classifier", "model", "models", snapshot.MODEL_DESCRIPTOR, "consume", control=True),
        Edge("classifier", "out", "predictions", "ex.Prediction", "produce"),
        Edge("drift", "in", "predictions", "ex.Prediction", "consume"),
        Edge("drift", "reports", "reports", snapshot.DRIFT_REPORT, "produce"),
    ),
)


def metrics(records_in: float, records_out: float, dlq: float = 0, model: str = "wine:1") -> str:
    return METRICS.format(records_in=records_in, records_out=records_out, dlq=dlq, model=model)


def status(model: str | None = "wine:1") -> targets.AppStatus:
    replica = targets.ReplicaStatus(
        name="classifier-0",
        streamlet="classifier",
        index=0,
        running=True,
        ready=True,
        restarts=1,
        endpoint="http://127.0.0.1:1",
        model=model,
    )
    return targets.AppStatus(
        name="a",
        target="local",
        phase="Running",
        message="",
        up_to_date=True,
        streamlets=(
            targets.StreamletStatus(
                "classifier", desired=1, ready=1, running=1, restarts=1, lag=7, replicas=(replica,)
            ),
            targets.StreamletStatus("drift", desired=1, ready=0, running=0),
        ),
        kafka="k:9092",
    )


def build(older: snapshot.Reading | None, newer: snapshot.Reading, **extra: Any) -> dict[str, Any]:
    return snapshot.build(
        graph=GRAPH,
        status=extra.pop("status", status()),
        newer=newer,
        older=older,
        records=extra.pop("records", snapshot.Records()),
        formats={},
        dlq_topics={"classifier": "a.classifier.dlq", "drift": "a.drift.dlq"},
        now=1000.0,
    )


def reading(at: float, text: str) -> snapshot.Reading:
    return snapshot.Reading(at=at, replicas={"classifier-0": scrape.parse(text)})


def by_name(items: list[dict[str, Any]], key: str = "name") -> dict[str, dict[str, Any]]:
    return {item[key]: item for item in items}


def test_parse_reads_counters_per_port_lag_and_the_model_served() -> None:
    found = scrape.parse(metrics(100, 90, dlq=2, model="wine:2"))
    assert found.records_in == {"in": 100.0}  # the _created sample is not a count
    assert found.records_out == {"out": 90.0}
    assert found.dead_letters == {"in": 2.0}
    assert found.errors == 2.0
    assert found.lag == 7
    assert found.state == {"model": "wine:2"}
    assert scrape.parse("not { prometheus") == scrape.ReplicaMetrics()


def test_rates_are_the_difference_of_two_readings_over_the_time_between() -> None:
    snap = build(reading(10.0, metrics(100, 90)), reading(14.0, metrics(180, 150)))
    classifier = by_name(snap["streamlets"])["classifier"]
    assert classifier["rate_in"] == 20.0 and classifier["rate_out"] == 15.0
    assert classifier["records_in"] == 180.0
    assert by_name(classifier["replicas"])["classifier-0"]["rate_in"] == 20.0
    topics = by_name(snap["topics"])
    assert topics["predictions"]["rate_in"] == 15.0  # what the classifier wrote into it
    assert topics["features"]["rate_out"] == 20.0  # what was read from it
    assert topics["features"]["rate_in"] is None  # nobody in the app writes it: unknown, not 0
    edges = {(e["streamlet"], e["port"]): e["rate"] for e in snap["edges"]}
    assert edges[("classifier", "out")] == 15.0
    assert edges[("drift", "in")] is None  # no replica answered
    assert snap["rates_known"] is True


def test_the_first_reading_has_no_rates_and_a_restart_counts_from_zero() -> None:
    first = build(None, reading(10.0, metrics(100, 90)))
    assert by_name(first["streamlets"])["classifier"]["rate_in"] is None
    assert first["rates_known"] is False
    restarted = build(reading(10.0, metrics(100, 90)), reading(12.0, metrics(8, 6)))
    assert by_name(restarted["streamlets"])["classifier"]["rate_in"] == 4.0


def test_dead_letters_are_counted_with_their_topic_and_rate() -> None:
    snap = build(reading(0.0, metrics(10, 10, dlq=1)), reading(2.0, metrics(20, 18, dlq=5)))
    classifier = by_name(snap["streamlets"])["classifier"]
    assert classifier["dead_letters"] == {
        "count": 5,
        "rate": 2.0,
        "topic": "a.classifier.dlq",
        "writer_schemas": [],  # none of them from a writer schema the inlet cannot read
    }
    assert by_name(snap["streamlets"])["drift"]["dead_letters"]["count"] == 0


def test_each_replica_shows_the_model_its_own_metrics_report() -> None:
    # the replica's /metrics is newer than the target's probe: it wins
    snap = build(None, reading(0.0, metrics(1, 1, model="wine:2")), status=status("wine:1"))
    classifier = by_name(snap["streamlets"])["classifier"]
    assert classifier["models"] == ["wine:2"]
    assert by_name(classifier["replicas"])["classifier-0"]["model"] == "wine:2"
    assert classifier["roles"] == ["model"]
    silent = build(None, snapshot.Reading(at=0.0), status=status("wine:1"))
    assert by_name(silent["streamlets"])["classifier"]["models"] == ["wine:1"]


def report(source: str, drifted: bool, minute: int) -> dict[str, Any]:
    return {
        "detector": "drift",
        "source": source,
        "model": "wine",
        "model_version": 2,
        "window": {"index": 3, "records": 178},
        "features": [
            {"feature": "alcohol", "drifted": drifted},
            {"feature": "alcohol", "drifted": drifted},  # by a second test
            {"feature": "ash", "drifted": False},
        ],
        "signals": [],
        "drifted": drifted,
        "severity": "HIGH" if drifted else "NONE",
        "message": "",
        "time": dt.datetime(2025, 1, 1, 0, minute, tzinfo=dt.UTC),
    }


def test_the_drift_verdict_is_drifted_when_any_source_newest_report_says_so() -> None:
    records = snapshot.Records(
        drift={"drift": [report("inputs", True, 1), report("outputs", False, 2)]}
    )
    snap = build(None, snapshot.Reading(at=0.0), records=records)
    verdict = snap["drift"]
    assert verdict["drifted"] is True and verdict["verdict"] == "drift"
    assert verdict["severity"] == "HIGH"
    assert verdict["time"] == dt.datetime(2025, 1, 1, 0, 2, tzinfo=dt.UTC).timestamp()
    inputs = by_name(verdict["reports"], "source")["inputs"]
    assert inputs["features"] == ["alcohol"] and inputs["window"] == 3
    drift = by_name(snap["streamlets"])["drift"]
    assert drift["roles"] == ["drift"] and len(drift["drift"]) == 2
    calm = build(
        None,
        snapshot.Reading(at=0.0),
        records=snapshot.Records(drift={"drift": [report("inputs", False, 1)]}),
    )
    assert calm["drift"]["verdict"] == "no drift" and calm["drift"]["severity"] == "NONE"
    assert build(None, snapshot.Reading(at=0.0))["drift"] is None


def test_an_explanation_sample_shows_its_strongest_attributions_first() -> None:
    attributions = [
        {"feature": f"f{i}", "value": float(i), "attribution": (-1) ** i * i / 10}
        for i in range(10)
    ]
    explanation = {
        "key": "w-1",
        "model": "wine",
        "model_version": 2,
        "method": "INTEGRATED_GRADIENTS",
        "reason": "SAMPLE",
        "target": 1,
        "prediction": [0.1, 0.8, 0.1],
        "attributions": attributions,
        "time": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    }
    snap = build(
        None,
        snapshot.Reading(at=0.0),
        records=snapshot.Records(explanations={"explain": explanation}),
    )
    shown = snap["explanation"]
    assert shown["streamlet"] == "explain" and shown["confidence"] == 0.8
    assert [a["feature"] for a in shown["attributions"]] == ["f9", "f8", "f7", "f6", "f5", "f4"]
    assert shown["features"] == 10


def test_autoscale_status_is_passed_through_when_present() -> None:
    base = status()
    scaled = targets.AutoscaleStatus(
        min=1, max=4, target_lag=100, replicas=2, reason="lag 480 > 100 per replica x 1"
    )
    classifier = base.streamlets[0]
    changed = targets.AppStatus(
        **{
            **base.__dict__,
            "streamlets": (
                targets.StreamletStatus(**{**classifier.__dict__, "autoscale": scaled}),
                base.streamlets[1],
            ),
        }
    )
    snap = build(None, snapshot.Reading(at=0.0), status=changed)
    shown = by_name(snap["streamlets"])["classifier"]["autoscale"]
    assert shown["replicas"] == 2 and shown["reason"].startswith("lag 480")
    assert by_name(snap["streamlets"])["drift"]["autoscale"] is None


def _decision(candidate: int, sequence: int, verdict: str, **extra: Any) -> dict[str, Any]:
    arm = {"records": 90, "failures": 10, "labelled": 40, "correct": 30, "latency_p99_ms": 2.5}
    return {
        "model": "wine",
        "stable_version": 1,
        "candidate_version": candidate,
        "sequence": sequence,
        "step": 2,
        "steps": 3,
        "mode": "canary",
        "share": 25.0,
        "verdict": verdict,
        "reason": f"reason {sequence}",
        "windows": 4,
        "stable": arm,
        "candidate": {**arm, "correct": 20},
        "interval_low": -0.4,
        "interval_high": 0.1,
        "agreement": None,
        "distance": 0.1,
        "time": dt.datetime(2025, 1, 1, 0, sequence, tzinfo=dt.UTC),
        **extra,
    }


def test_the_rollout_is_the_newest_candidates_with_its_decisions_newest_first() -> None:
    decisions = [_decision(2, 1, "HOLD"), _decision(2, 2, "ROLLBACK")]
    decisions += [_decision(3, n, "HOLD") for n in range(1, 16)] + [_decision(3, 16, "ADVANCE")]
    snap = build(
        None, snapshot.Reading(at=0.0), records=snapshot.Records(decisions={"c": decisions})
    )
    rollout = snap["rollout"]
    assert (rollout["candidate_version"], rollout["verdict"], rollout["ended"]) == (
        3,
        "ADVANCE",
        False,
    )
    assert [d["sequence"] for d in rollout["history"]] == list(range(16, 4, -1))  # the newest 12
    stable, candidate = rollout["arms"]
    assert (stable["role"], stable["version"], stable["accuracy"]) == ("stable", 1, 0.75)
    assert (candidate["accuracy"], candidate["error_rate"]) == (0.5, 0.1)
    assert rollout["interval"] == [-0.4, 0.1]
    assert rollout["time"] == dt.datetime(2025, 1, 1, 0, 16, tzinfo=dt.UTC).timestamp()
    assert build(None, snapshot.Reading(at=0.0))["rollout"] is None
