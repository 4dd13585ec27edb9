"""A stop within its bound, one rule at a time, over Kafka in memory (issue 38, finding 3).

The deadline counts from the stop request; a flush, a wait for room in the queue
and an exactly-once commit end by it; what Kafka did not take is counted and
said last; and should a call outlive the bound, the watch ends the process. The
broker tests (``test_stop_without_kafka.py``) show the same against a real,
killed, broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from streamflow import Record
from streamflow.runtime import shutdown
from streamflow.runtime.delivery import CallWatchdog
from streamflow.runtime.inmemory import MemoryBroker, MemoryConsumer, MemoryProducer
from streamflow.runtime.transactions import ExactlyOnce, TransactionAborted
from tests.runtime import memory_support
from tests.runtime.memory_support import GROUP, IN, OUT, Copy, ManualClock
from tests.waiting import wait_until


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _requested(flush_timeout_s: float = 0.0, **kwargs: Any) -> shutdown.Stopping:
    """A stop already requested, whose deadline is ``flush_timeout_s`` from now."""
    stopping = shutdown.Stopping(flush_timeout_s=flush_timeout_s, **kwargs)
    stopping.stop.set()
    return stopping


# -- the deadline -------------------------------------------------------------------


def test_the_deadline_counts_from_the_stop_request() -> None:
    clock = ManualClock()
    stopping = shutdown.Stopping(flush_timeout_s=10, clock=clock)
    clock.now = 100.0
    assert not stopping.requested and stopping.cap(30) == 30  # no stop, no limit
    stopping.stop.set()
    clock.now = 104.0  # seen now: counted from here
    assert stopping.left() == 10 and stopping.cap(30) == 10
    clock.now = 111.0
    assert stopping.cap(30) == 3 and not stopping.overdue
    clock.now = 114.0
    assert stopping.overdue and stopping.cap(30) == 0
    assert stopping.bound_s == 10 + shutdown.CLOSE_MARGIN_S


def test_a_flush_ends_at_the_deadline_with_what_kafka_still_holds() -> None:
    producer = MemoryProducer(MemoryBroker())
    producer.produce(OUT, b"o1")
    assert _requested().flush(producer, 30) == 0  # acknowledged: nothing held
    producer.hold()  # Kafka away
    producer.produce(OUT, b"o2")
    producer.produce(OUT, b"o3")
    assert _requested().flush(producer, 30) == 2


def test_a_close_that_never_returns_is_left_behind_by_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A consumer's close waiting on a coordinator that is gone must not take the process
    past its bound: the replica goes on, and its last line says what it left."""
    clock = ManualClock()
    stopping = _requested(flush_timeout_s=10, clock=clock)
    assert stopping.requested  # the deadline counts from 0
    clock.now = stopping.bound_s - shutdown.CLOSE_RESERVE_S  # nothing of the wait is left
    never = threading.Event()
    with caplog.at_level(logging.WARNING, logger="streamflow.runtime"):
        assert stopping.close("the consumer", never.wait) is False
        stopping.last_line()
    assert "closing the consumer did not end in time" in caplog.text
    assert caplog.records[-1].getMessage() == "stopped: the consumer was left unclosed"
    never.set()


def test_a_close_that_returns_or_raises_is_waited_for() -> None:
    closed: list[str] = []
    assert _requested(flush_timeout_s=10).close("the consumer", lambda: closed.append("x"))
    assert shutdown.Stopping().close("before any stop", lambda: closed.append("y"))
    assert closed == ["x", "y"]

    def broken() -> None:
        raise KafkaException(KafkaError(KafkaError._DESTROY))

    with pytest.raises(KafkaException):
        _requested(flush_timeout_s=10).close("the consumer", broken)


def test_the_last_line_says_what_was_not_delivered(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "streamflow.runtime")
    shutdown.Stopping().last_line()
    told = shutdown.Stopping()
    told.tell(1)
    told.last_line()
    several = shutdown.Stopping()
    several.tell(40, "the inputs are processed again")
    several.tell(2, "the inputs are processed again")
    several.last_line()
    assert [r.getMessage() for r in caplog.records] == [
        "stopped cleanly",
        "stopped: 1 record was not delivered (Kafka unreachable)",
        "stopped: 42 records were not delivered (Kafka unreachable); "
        "the inputs are processed again",
    ]


def test_the_watch_ends_a_replica_still_running_past_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, exits = ManualClock(), threading.Event()
    codes: list[int] = []

    def exit(code: int) -> None:
        codes.append(code)
        exits.set()

    stopping = _requested(10, clock=clock, exit=exit)
    stopping.pending = lambda: 7
    assert stopping.requested  # at 0
    clock.now = 16.0  # past 10 s + the margin: a Kafka call that never returned
    stopping.watch()
    wait_until(exits.is_set, what="the watch to end the process", timeout=10)
    assert codes == [shutdown.Stopping.EXIT_OVERRAN]
    assert "stopped: 7 records were not delivered (Kafka unreachable)" in caplog.text


def test_a_replica_that_ended_in_time_is_left_alone() -> None:
    codes: list[int] = []
    stopping = _requested(10, exit=codes.append)
    stopping.watch()
    stopping.last_line()
    assert codes == []  # (the watch returned; a late exit would fail the next tests)


def test_ctrl_c_stops_a_replica_as_sigterm_does(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "streamflow.runtime")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    wakeup_fd = signal.set_wakeup_fd(-1)
    stop = threading.Event()
    try:
        shutdown.install_signal_handlers(stop, bound_s=15)
        os.kill(os.getpid(), signal.SIGINT)
        wait_until(stop.is_set, what="the stop request", timeout=10)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(wakeup_fd)
    assert "received SIGINT; finishing the current batch (ending within 15s" in caplog.text


# -- the loops and the guarantees ---------------------------------------------------


class _StopsMidBatch(Copy):
    """Copies, and asks for a stop (sets ``stopping``) while its batch is being written."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = threading.Event()

    def process(self, record: Record) -> dict[str, Any]:
        self.stopping.set()
        return super().process(record)


def test_a_full_queue_at_the_deadline_leaves_the_batch_unwritten(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Before, the loop waited for room in the queue for as long as Kafka was away."""
    streamlet = _StopsMidBatch()
    rig = memory_support.rig(streamlet, loop, queue_limit=2)
    streamlet.stopping = rig.processor.stop
    rig.delivery.stopping = shutdown.Stopping(rig.processor.stop, flush_timeout_s=0)
    rig.producer.hold()
    rig.write(*({"id": f"r{i}"} for i in range(5)))
    rig.processor.run()  # returns: the third output found no room by the deadline
    assert rig.stored() is None and rig.committed() is None  # its batch is read again
    assert rig.delivery.close() == 2  # the two outputs Kafka never acknowledged


def _transactions(stopping: shutdown.Stopping) -> tuple[ExactlyOnce, MemoryProducer, MemoryBroker]:
    broker = MemoryBroker()
    broker.append(IN, b"r0")
    consumer = MemoryConsumer(broker, group=GROUP)
    consumer.subscribe([IN])
    consumer.consume(1)
    producer = MemoryProducer(broker)
    delivery = ExactlyOnce(
        cast(Producer, producer),
        cast(Consumer, consumer),
        watchdog=CallWatchdog(exit=lambda code: None),
        stopping=stopping,
    )
    return delivery, producer, broker


def test_exactly_once_a_stop_aborts_what_kafka_did_not_take_by_the_deadline() -> None:
    """Committing would wait inside commit_transaction, past the bound and beyond an abort."""
    delivery, producer, broker = _transactions(_requested())
    delivery.begin_batch()
    producer.hold()
    delivery.produce(OUT, b"o", None, [])
    with pytest.raises(TransactionAborted, match=r"stopping: .* did not acknowledge 1 of"):
        delivery.end_batch({(IN, 0): 1})
    assert producer.transactions == {"committed": 0, "aborted": 1}
    assert broker.records(OUT) == [] and GROUP not in broker.committed
    assert delivery.close() == 1
    assert delivery.stop_notes == [
        "its open transaction was aborted (Kafka unreachable): none of it shows"
    ]


def test_exactly_once_a_stop_with_no_broker_answering_aborts_rather_than_commits() -> None:
    """Kafka took the records, then went away: sending the offsets would block for good
    (librdkafka#5456), so the transaction is aborted and its batch left to the next owner."""
    delivery, producer, broker = _transactions(_requested(10))
    delivery.begin_batch()
    delivery.produce(OUT, b"o", None, [])
    producer.flush()

    def gone(topic: str | None = None, timeout: float = -1) -> Any:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))

    producer.list_topics = gone  # type: ignore[method-assign]
    with pytest.raises(TransactionAborted, match="Kafka is unreachable"):
        delivery.end_batch({(IN, 0): 1})
    assert producer.transactions == {"committed": 0, "aborted": 1}
    assert broker.records(OUT) == [] and GROUP not in broker.committed


def test_exactly_once_a_stop_with_kafka_there_commits_the_last_batch() -> None:
    delivery, _, broker = _transactions(_requested(10))
    delivery.begin_batch()
    delivery.produce(OUT, b"o", None, [])
    delivery.end_batch({(IN, 0): 1})
    assert [m.value() for m in broker.records(OUT)] == [b"o"]
    assert broker.committed[GROUP] == {(IN, 0): 1}
    assert delivery.close() == 0 and delivery.stop_notes == []
