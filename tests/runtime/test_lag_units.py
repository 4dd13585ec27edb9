"""Consumer lag from librdkafka's statistics, for both guarantees (issue 17, point 4).

An exactly-once replica commits its offsets inside its transactions, never through
its consumer, so librdkafka's own ``consumer_lag`` stayed at what was committed at
assignment: ``status`` showed 30,000 behind while the group had caught up.
"""

from __future__ import annotations

import json
from typing import Any, cast

from confluent_kafka import Consumer, Producer

from streamflow.runtime.delivery import CallWatchdog
from streamflow.runtime.inmemory import MemoryBroker, MemoryConsumer, MemoryProducer
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.transactions import ExactlyOnce


def _stats(**partition: Any) -> str:
    """A statistics document for partition 0 of ``in``, as librdkafka emits it."""
    return json.dumps(
        {"topics": {"in": {"partitions": {"0": partition, "-1": {"consumer_lag": -1}}}}}
    )


def _lag(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "streamflow_consumer_lag",
        {**metrics.labels, "topic": "in", "partition": "0"},
    )
    assert value is not None
    return value


def _never(code: int) -> None:
    raise AssertionError(code)


def test_exactly_once_lag_follows_the_transactions_commits() -> None:
    metrics = Metrics(app="a", streamlet="s", replica=0)
    broker = MemoryBroker()
    consumer = MemoryConsumer(broker)
    delivery = ExactlyOnce(
        cast(Producer, MemoryProducer(broker)),
        cast(Consumer, consumer),
        watchdog=CallWatchdog(exit=_never),
        on_committed=metrics.committed_in_transaction,
    )
    stale = {"committed_offset": 0, "ls_offset": 30_000, "hi_offset": 30_000}
    metrics.on_stats(_stats(consumer_lag=30_000, **stale))
    assert _lag(metrics) == 30_000
    delivery.begin_batch()
    delivery.end_batch({("in", 0): 29_990})
    metrics.on_stats(_stats(consumer_lag=30_000, **stale))  # librdkafka's view: unchanged
    assert _lag(metrics) == 10


def test_at_least_once_lag_is_from_the_committed_offset_to_the_last_stable_one() -> None:
    metrics = Metrics(app="a", streamlet="s", replica=0)
    metrics.on_stats(_stats(consumer_lag=500, committed_offset=100, ls_offset=550, hi_offset=600))
    assert _lag(metrics) == 450  # read_committed: an open transaction's records do not count


def test_a_partition_never_committed_keeps_librdkafkas_figure() -> None:
    metrics = Metrics(app="a", streamlet="s", replica=0)
    metrics.on_stats(_stats(consumer_lag=42, committed_offset=-1001, ls_offset=42))
    assert _lag(metrics) == 42


def test_a_revoked_partition_forgets_its_transaction_offsets() -> None:
    metrics = Metrics(app="a", streamlet="s", replica=0)
    metrics.committed_in_transaction({("in", 0): 900})
    metrics.forget_partitions([("in", 0)])
    metrics.on_stats(_stats(consumer_lag=1000, committed_offset=0, ls_offset=1000))
    assert _lag(metrics) == 1000


def test_a_revoked_partition_counts_no_lag_though_librdkafka_still_reports_it() -> None:
    """librdkafka keeps a revoked partition in its statistics with the offsets it had at
    the revoke: its lag stayed in `status`, and an idle replica that had lost a partition
    under load looked stuck to the liveness check (records waiting, none taken)."""
    metrics = Metrics(app="a", streamlet="s", replica=0)
    frozen = json.loads(_stats(committed_offset=100, ls_offset=400, hi_offset=400))
    frozen["brokers"] = {"b1": {"nodeid": 1, "state": "UP"}}
    stats = json.dumps(frozen)
    metrics.own_partitions([("in", 0)])
    assert metrics.on_stats(stats) == 300
    metrics.forget_partitions([("in", 0)])
    assert metrics.on_stats(stats) == 0
    no_lag = metrics.registry.get_sample_value(
        "streamflow_consumer_lag", {**metrics.labels, "topic": "in", "partition": "0"}
    )
    assert no_lag is None
    metrics.own_partitions([("in", 0)])  # assigned again: its owner's lag counts again
    assert metrics.on_stats(stats) == 300


def _up(stats_json: str) -> str:
    """The same statistics with one broker up, as on a live replica."""
    stats = json.loads(stats_json)
    stats["brokers"] = {"b1": {"nodeid": 1, "state": "UP"}}
    return json.dumps(stats)


def test_a_commit_marker_at_the_end_is_no_record_waiting() -> None:
    """Behind a transactional producer a caught-up group commits up to the last record,
    one short of the end: the commit marker takes the last offset and no consumer is
    handed it. Counted as waiting, it made the liveness check restart idle replicas."""
    metrics = Metrics(app="a", streamlet="s", replica=0)
    quiet = _stats(committed_offset=999, app_offset=1000, ls_offset=1000, hi_offset=1000)
    assert metrics.on_stats(_up(quiet)) == 0
    assert _lag(metrics) == 1  # the exported lag stays the group's, as Kafka's tools show it


def test_records_past_the_position_wait_for_the_loop() -> None:
    metrics = Metrics(app="a", streamlet="s", replica=0)
    behind = _stats(committed_offset=100, app_offset=400, ls_offset=1000, hi_offset=1000)
    assert metrics.on_stats(_up(behind)) == 600
    assert _lag(metrics) == 900


def test_without_a_position_the_committed_offset_counts() -> None:
    metrics = Metrics(app="a", streamlet="s", replica=0)
    fresh = _stats(committed_offset=100, app_offset=-1001, ls_offset=1000, hi_offset=1000)
    assert metrics.on_stats(_up(fresh)) == 900
