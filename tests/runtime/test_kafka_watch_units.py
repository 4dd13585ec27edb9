"""Kafka going away, in the log and the readiness: once, a summary, once when back.

librdkafka's lines arrive on the ``streamflow.kafka`` logger as
``('FAIL', client, text)``; these feed the watch the very records it sees,
with a clock the test moves.
"""

from __future__ import annotations

import json
import logging

import pytest

from streamflow.runtime.health import HealthState
from streamflow.runtime.kafka_watch import KafkaWatch, is_connection_failure

REFUSED = (
    "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect to "
    "ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def line(client: str, text: str = REFUSED, fac: str = "FAIL") -> logging.LogRecord:
    return logging.LogRecord("streamflow.kafka", logging.ERROR, "", 0, "%s [%s] %s",
                             (fac, client, text), None)  # fmt: skip


def stats(*states: str, age_s: float = 1.0) -> str:
    brokers = {
        f"b{i}:9092/{i}": {"state": s, "nodeid": i, "stateage": int(age_s * 1e6)}
        for i, s in enumerate(states)
    }
    brokers["b:9092/bootstrap"] = {"state": "UP", "nodeid": -1}  # the bootstrap: not a broker
    return json.dumps({"brokers": brokers})


def test_an_outage_is_told_once_summed_up_each_interval_and_ended_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, health = Clock(), HealthState()
    health.set_ready(True)
    watch = KafkaWatch(health=health, summary_every=60, clock=clock)
    clients = ["app.s.0#consumer-1", "app.s.0.control#consumer-2", "app.s.0#producer-3"]
    kept = []
    with caplog.at_level(logging.INFO, logger="streamflow.runtime"):
        for second in range(200):  # three clients failing every second for 200 s
            clock.now = 100.0 + second
            kept += [watch.filter(line(c)) for c in clients]
            if second == 30:
                assert not health.ready
                assert health.reasons[0].startswith("Kafka unreachable since ")
                assert "127.0.0.1:9092: Connect to ipv4#127.0.0.1:9092 failed" in health.reasons[0]
        on_stats = watch.stats_cb()
        on_stats(stats("DOWN"))  # the bootstrap's UP is not a broker: still down
        on_stats(stats("UP", age_s=500))  # a snapshot from before the outage was noticed
        assert watch.down
        on_stats(stats("DOWN", "UP"))
    assert not any(kept)  # every attempt at DEBUG, which this logger does not show
    told = [r.getMessage() for r in caplog.records if r.name == "streamflow.runtime"]
    assert len(told) == 1 + 3 + 1, told  # the first, a summary at 60, 120, 180 s, the end
    assert told[0].startswith("Kafka is unreachable: 127.0.0.1:9092: Connect to")
    assert "Connection refused" in told[0] and "(after" not in told[0]
    assert told[1].startswith("Kafka unreachable for 60s, 181 connection attempts of the ")
    assert "consumer, control reader and producer failed" in told[1]
    assert told[3].startswith("Kafka unreachable for 3 min, ")
    assert (
        told[4]
        == "Kafka is reachable again, after 3 min unreachable (600 connection attempts failed)"
    )
    assert health.ready and health.reasons == []


def test_a_dropped_connection_alone_is_no_outage_but_is_part_of_one() -> None:
    watch = KafkaWatch(clock=Clock())
    idle = line("c#producer-1", "127.0.0.1:9092/1: Disconnected (after 600000ms in state UP)")
    assert watch.filter(idle) and idle.levelno == logging.ERROR and not watch.down
    assert not watch.filter(line("c#producer-1"))
    assert watch.down
    again = line("c#producer-1", "127.0.0.1:9092/1: Disconnected (after 1ms in state UP)")
    assert not watch.filter(again) and watch.attempts == 2


def test_other_lines_pass_and_attempts_show_at_debug() -> None:
    watch = KafkaWatch(clock=Clock())
    other = line("c#consumer-1", "Group coordinator changed", fac="CGRPCOORD")
    assert watch.filter(other) and other.levelno == logging.ERROR
    assert not is_connection_failure(other)
    assert is_connection_failure(line("c#producer-1", "1/1 brokers are down", fac="ERROR"))
    logger = logging.getLogger("streamflow.kafka")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        attempt = line("c#consumer-1")
        assert watch.filter(attempt) and attempt.levelno == logging.DEBUG
    finally:
        logger.setLevel(level)


def test_a_replica_not_ready_for_its_own_reasons_keeps_them_beside_kafkas() -> None:
    health = HealthState()
    health.set_ready(False, ["no model loaded"])
    health.dependency_down("kafka", "Kafka unreachable since 12:00:00: x")
    assert health.reasons == ["Kafka unreachable since 12:00:00: x", "no model loaded"]
    health.dependency_down("kafka", None)
    health.set_ready(True)
    assert health.ready


def test_the_summary_comes_on_time_when_librdkafka_goes_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """librdkafka folds identical errors for 30 s: a producer alone may log one line in
    half a minute. The summary then comes with the client's statistics (every 5 s)."""
    clock = Clock()
    watch = KafkaWatch(summary_every=10, clock=clock)
    on_stats = watch.stats_cb()
    with caplog.at_level(logging.INFO, logger="streamflow.runtime"):
        watch.filter(line("app.src.0#producer-1"))  # the one line, then silence
        for second in range(5, 65, 5):  # its statistics, every 5 s, no broker up
            clock.now = 100.0 + second
            on_stats(stats("DOWN"))
    told = [r.getMessage() for r in caplog.records if r.name == "streamflow.runtime"]
    assert told[0].startswith("Kafka is unreachable: ")
    assert [m.split(",")[0] for m in told[1:]] == [
        f"Kafka unreachable for {s}s" for s in (10, 20, 30, 40, 50, 60)
    ], told
    assert all("1 connection attempts of the producer failed" in m for m in told[1:])
