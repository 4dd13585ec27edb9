"""The ingress runner's ``emit``, over Kafka in memory: route, encode, produce."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from streamflow import Emit, Outlet, Streamlet
from streamflow.api.descriptor import describe
from streamflow.runtime import shutdown
from streamflow.runtime.delivery import AtLeastOnce, CallWatchdog, CountedOutputs, Delivery
from streamflow.runtime.health import HealthState
from streamflow.runtime.inmemory import MemoryBroker, MemoryProducer
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.source import SourceRunner
from streamflow.runtime.transactions import ExactlyOnce
from tests.runtime import memory_support
from tests.runtime.memory_support import OUT
from tests.waiting import wait_until


class _Ticks(Streamlet):
    out = Outlet("out", "tests.runtime.Scaled")

    def source(self) -> Iterator[dict[str, Any]]:
        yield {"id": "t0"}


class _Five(_Ticks):
    def source(self) -> Iterator[dict[str, Any]]:
        for i in range(5):
            yield {"id": f"t{i}"}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _runner(
    loop: asyncio.AbstractEventLoop, *, queue_limit: int = 100_000
) -> tuple[SourceRunner, MemoryBroker]:
    broker = MemoryBroker()
    failures = CountedOutputs()  # a source's producer reports every delivery
    producer = MemoryProducer(broker, queue_limit=queue_limit, config=failures.producer_config())
    runner = SourceRunner(
        streamlet=_Ticks(),
        descriptor=describe(_Ticks),
        bindings=memory_support.bindings(),
        delivery=AtLeastOnce(cast(Producer, producer), None, failures),
        metrics=Metrics(app="app", streamlet="unit", replica=0),
        health=HealthState(),
        loop=loop,
        stop=threading.Event(),
    )
    return runner, broker


def test_an_emitted_item_is_written_with_its_schema_header(
    loop: asyncio.AbstractEventLoop,
) -> None:
    runner, broker = _runner(loop)
    runner.delivery.begin_batch()
    runner.emit({"id": "t0"})
    runner.delivery.end_batch({})
    [msg] = broker.records(OUT)
    assert json.loads(msg.value() or b"") == {"id": "t0"}
    assert msg.key() is None  # an ingress has no input key to keep
    assert memory_support.headers_of(msg) == {"streamflow-schema": b"tests.runtime.Scaled"}


def test_an_emit_with_key_and_headers_keeps_them(loop: asyncio.AbstractEventLoop) -> None:
    runner, broker = _runner(loop)
    runner.delivery.begin_batch()
    runner.emit(Emit("out", {"id": "t0"}, key="k", headers={"trace": "abc"}))
    runner.delivery.end_batch({})
    [msg] = broker.records(OUT)
    assert msg.key() == b"k"
    assert memory_support.headers_of(msg)["trace"] == b"abc"


def test_a_full_queue_slows_the_source_and_loses_nothing(
    loop: asyncio.AbstractEventLoop,
) -> None:
    runner, broker = _runner(loop, queue_limit=1)
    runner.delivery.begin_batch()
    for i in range(5):
        runner.emit([{"id": f"t{i}.a"}, {"id": f"t{i}.b"}])
    runner.delivery.end_batch({})
    runner.delivery.poll()
    ids = [json.loads(m.value() or b"")["id"] for m in broker.records(OUT)]
    assert ids == [f"t{i}.{x}" for i in range(5) for x in "ab"]


def test_exactly_once_a_chunk_whose_transaction_aborted_is_written_again_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A source cannot be rewound: before, an aborted chunk's records were gone (and the
    ``TransactionAborted`` ended the replica, which replayed the source from its start)."""
    broker = MemoryBroker()
    producer = MemoryProducer(broker)
    delivery = ExactlyOnce(
        cast(Producer, producer), None, watchdog=CallWatchdog(exit=lambda code: None)
    )
    stop = threading.Event()
    runner = SourceRunner(
        streamlet=_Five(),
        descriptor=describe(_Five),
        bindings=memory_support.bindings(),
        delivery=delivery,
        metrics=Metrics(app="app", streamlet="unit", replica=0),
        health=HealthState(),
        loop=loop,
        stop=stop,
    )
    timed_out = KafkaError(
        KafkaError._TIMED_OUT,
        "coordinator did not answer",
        retriable=False,
        txn_requires_abort=True,
    )
    producer.fail_call("commit_transaction", KafkaException(timed_out))
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait_until(lambda: len(broker.records(OUT)) >= 5, timeout=30, what="the five records")
    finally:
        stop.set()
        thread.join(30)
    ids = [json.loads(m.value() or b"")["id"] for m in broker.records(OUT)]
    assert sorted(ids) == [f"t{i}" for i in range(5)]  # every one, once
    assert producer.transactions["aborted"] == 1


# -- what a source says it delivered, and its stop (issue 38, findings 2 and 3) ---------


class _Endless(_Ticks):
    def source(self) -> Iterator[dict[str, Any]]:
        for i in itertools.count():
            yield {"id": f"t{i}"}


def _stoppable(
    loop: asyncio.AbstractEventLoop, streamlet: Streamlet, delivery: Delivery, **kwargs: Any
) -> SourceRunner:
    return SourceRunner(
        streamlet=streamlet,
        descriptor=describe(type(streamlet)),
        bindings=memory_support.bindings(),
        delivery=delivery,
        metrics=Metrics(app="app", streamlet="unit", replica=0),
        health=HealthState(),
        loop=loop,
        stop=delivery.stopping.stop,
        **kwargs,
    )


def test_delivered_counts_what_kafka_acknowledged_not_what_was_produced(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Before, a dataset source logged "6586 records emitted" to a broker that was gone."""
    runner, broker = _runner(loop)
    producer = cast(MemoryProducer, runner.delivery.producer)
    producer.hold()  # Kafka away
    runner.delivery.begin_batch()
    for i in range(3):
        runner.emit({"id": f"t{i}"})
    runner.delivery.end_batch({})
    assert (runner.handed, runner.delivered, runner.queued) == (3, 0, 3)
    producer.release()  # back
    runner.delivery.poll()
    assert (runner.delivered, runner.queued) == (3, 0)
    assert len(broker.records(OUT)) == 3


def test_a_source_is_held_back_at_its_bound_and_says_what_kafka_did_not_get(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "streamflow.runtime")
    failures = CountedOutputs()
    producer = MemoryProducer(MemoryBroker(), config=failures.producer_config())
    stopping = shutdown.Stopping(flush_timeout_s=0)
    delivery = AtLeastOnce(cast(Producer, producer), None, failures, stopping=stopping)
    runner = _stoppable(loop, _Endless(), delivery, max_queued=20)
    producer.hold()  # Kafka away, for good
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait_until(
            lambda: runner.health.activity.startswith("waiting for Kafka"),
            what="the source to wait for Kafka",
            timeout=30,
        )
        assert runner.handed == 20  # the source is not pulled past its bound
        queued = runner.metrics.registry.get_sample_value(
            "streamflow_records_queued", runner.metrics.labels
        )
        assert queued == 20
    finally:
        stopping.stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert stopping.not_delivered == 20
    assert "source: 0 records delivered, 20 not delivered" in caplog.text


def test_exactly_once_a_stop_with_kafka_away_aborts_the_open_chunk_and_counts_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Before, the chunk's commit_transaction held the stop for a minute."""
    broker = MemoryBroker()
    producer = MemoryProducer(broker)
    stopping = shutdown.Stopping(flush_timeout_s=0)
    delivery = ExactlyOnce(
        cast(Producer, producer),
        None,
        watchdog=CallWatchdog(exit=lambda code: None),
        stopping=stopping,
    )
    runner = _stoppable(loop, _Five(), delivery)
    producer.hold()  # Kafka away: the chunk's commit waits for its records
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait_until(lambda: runner.handed == 5, what="the five records", timeout=30)
    finally:
        stopping.stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert producer.transactions == {"committed": 0, "aborted": 1}
    assert broker.records(OUT) == []
    assert stopping.not_delivered == 5
    assert stopping.notes == [
        "its open transaction was aborted (Kafka unreachable): none of it shows"
    ]
