"""On the real broker: a drift detector killed with ``kill -9`` mid-window carries on where it was.

The reference is the first 200 points; every point after it is shifted, so
each window drifts. Window 0 (points 200-599) raises the one alert; the
detector reads half of window 1 (600-799), its offsets are committed, and it
is killed. The supervisor starts it again, the rest of window 1 arrives, and
the next report must cover all of 600-999 (the rows from before the kill
came back from the changelog), judged against the same reference, with no
second alert: the verdict "drifted" came back too.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streamflow.blueprint.model import Application
from streamflow.runtime import grouplag
from streamflow.runtime.clients import KafkaClients
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.runtime import support
from tests.streamlets.drift import drift_support as d
from tests.waiting import wait_until

ROOT = Path(__file__).parents[3]
STORE = SchemaStore([d.SCHEMAS])
WINDOW, REFERENCE = 400, 200


def _codec(name: str) -> SingleObjectCodec:
    return SingleObjectCodec(STORE.get(name), store=STORE)


def _app(bootstrap: str, guarantee: str) -> Application:
    return support.make_app(
        bootstrap,
        streamlets={
            "drift": {
                "class": "tests.streamlets.drift.drift_support:InputDrift",
                "guarantee": guarantee,
                "config": {
                    "numeric": ["x", "y"],
                    "window": WINDOW,
                    "reference_size": REFERENCE,
                },
            }
        },
        topics=d.kafka_topics(predictions=False),
        schema_paths=[d.SCHEMAS],
        python_paths=[ROOT],
    )


def _send(bootstrap: str, app: Application, start: int, count: int) -> None:
    codec = _codec(d.POINT)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for point in d.points(count, seed=start, start=start, shift=3.0, shift_at=REFERENCE):
        producer.produce(support.topic(app, "points"), codec.encode(point), point["id"])
    assert producer.flush(60) == 0


def _reports(bootstrap: str, topic: str, n: int, timeout: float) -> list[dict[str, Any]]:
    codec = _codec("streamflow.ml.DriftReport")
    found = support.consume_until(bootstrap, topic, support.count_at_least(n), timeout=timeout)
    return [codec.decode(m.value()) for m in found]


def _committed(bootstrap: str, app: Application) -> int:
    admin = KafkaClients(bootstrap=bootstrap).admin()
    measured = grouplag.measure(
        admin, group=app.consumer_group("drift"), topics=[support.topic(app, "points")]
    )
    return measured.consumed


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_detector_killed_mid_window_reports_the_whole_window_and_alerts_once(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarantee: str
) -> None:
    monkeypatch.setenv("STREAMFLOW_STATE_DIR", str(tmp_path / "state"))
    app = _app(kafka_bootstrap, guarantee)
    reports_topic, alerts_topic = support.topic(app, "reports"), support.topic(app, "alerts")
    with support.replicas(app, tmp_path) as running:
        victim = running.start("drift")
        _send(kafka_bootstrap, app, 0, REFERENCE + WINDOW + WINDOW // 2)
        first = _reports(kafka_bootstrap, reports_topic, 1, timeout=120)
        assert [r["window"]["records"] for r in first] == [WINDOW], running.log()
        # the half window is read and its offsets committed: nothing of it is read again
        wait_until(
            lambda: _committed(kafka_bootstrap, app) == REFERENCE + WINDOW + WINDOW // 2,
            timeout=60,
            what="the half window's offsets to be committed",
        )
        assert victim.process is not None
        os.kill(victim.process.pid, signal.SIGKILL)  # the supervisor starts it again
        wait_until(lambda: victim.restarts >= 1, timeout=60, what="a restart")
        _send(kafka_bootstrap, app, REFERENCE + WINDOW + WINDOW // 2, WINDOW // 2)
        reports = _reports(kafka_bootstrap, reports_topic, 2, timeout=120)
        alerts = _reports(kafka_bootstrap, alerts_topic, 1, timeout=10)
        log = running.log()

    assert len(reports) == 2, log
    after = reports[1]
    assert after["window"]["index"] == 1, log
    assert after["window"]["records"] == WINDOW
    (span,) = after["window"]["offsets"]
    assert (span["first"], span["last"]) == (REFERENCE + WINDOW, REFERENCE + 2 * WINDOW - 1)
    assert reports[0]["drifted"], (reports[0], log)
    assert after["drifted"], (after, log)
    # judged against the same reference: the first 200 points, not 200 shifted ones
    assert "x" in {f["feature"] for f in after["features"] if f["drifted"]}, after
    assert len(alerts) == 1 and alerts[0]["window"]["index"] == 0, alerts
    restored = re.findall(r"restored the state of in\[0\]: (\d+) changelog records", log)
    assert len(restored) == 2 and int(restored[1]) > 0, log
