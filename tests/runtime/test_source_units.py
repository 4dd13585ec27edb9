"""The ingress runner's ``emit``, over Kafka in memory: route, encode, produce."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from streamflow import Emit, Outlet, Streamlet
from streamflow.api.descriptor import describe
from streamflow.runtime.delivery import AtLeastOnce, CallWatchdog, ExactlyOnce, FailedOutputs
from streamflow.runtime.health import HealthState
from streamflow.runtime.inmemory import MemoryBroker, MemoryProducer
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.source import SourceRunner
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
    failures = FailedOutputs()
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
