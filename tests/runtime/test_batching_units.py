"""How a replica takes a batch, and how at-least-once knows which partitions it owns.

A batch is what is queued; only when nothing is does the loop wait, and then for
one record, so an idle pipeline adds no batching delay (librdkafka's
``consume(n, timeout)`` waits for all ``n``). Right after an exactly-once commit, a
batch that is not full gathers records a moment longer. These fakes stand for the consumer, the
producer and the delivery strategy; the broker tests cover the real ones.
"""

from __future__ import annotations

import time
from typing import Any, cast

from confluent_kafka import Consumer, TopicPartition

from streamflow.api.streamlet import Streamlet
from streamflow.runtime.checkpoint import Checkpoint
from streamflow.runtime.delivery import AtLeastOnce, FailedOutputs
from streamflow.runtime.health import HealthState
from streamflow.runtime.intake import Intake
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings


class FakeConsumer:
    """``consume`` hands out what is queued, up to ``n``; ``arrivals`` come on a wait."""

    def __init__(self, queued: int = 0, arrivals: int = 0) -> None:
        self.queued, self.arrivals = queued, arrivals
        self.calls: list[tuple[int, float]] = []
        self.stored: list[list[TopicPartition]] = []
        self.asked_assignment = 0

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.calls.append((n, timeout))
        if not self.queued and timeout > 0:
            self.queued, self.arrivals = self.arrivals, 0
        taken = min(n, self.queued)
        self.queued -= taken
        return [object()] * taken

    def assignment(self) -> list[TopicPartition]:
        self.asked_assignment += 1
        return [TopicPartition("in", 0)]

    def store_offsets(self, *, offsets: list[TopicPartition]) -> None:
        self.stored.append(offsets)

    def commit(self, asynchronous: bool = True) -> None:
        pass


class FakeDelivery:
    commit_interval_s = 0.0
    not_before = 0.0


def _taker(consumer: FakeConsumer, *, size: int = 500) -> tuple[Intake, FakeDelivery]:
    """An intake over a fake consumer: only what ``next_batch`` reads."""
    delivery: Any = FakeDelivery()
    checkpoint = Checkpoint(
        delivery=delivery,
        state=None,
        batch_size=size,
        clock=time.monotonic,
        told=lambda tally: None,
        retry=lambda messages, aborted, earlier: None,
    )
    intake = Intake(
        streamlet=cast(Streamlet, None),
        bindings=cast(Bindings, None),
        consumer=cast(Consumer, consumer),
        delivery=delivery,
        checkpoint=checkpoint,
        metrics=cast(Metrics, None),
        health=cast(HealthState, None),
        state=None,
        batch_size=size,
        batch_timeout=0.1,
        clock=time.monotonic,
    )
    return intake, delivery


def test_a_backlog_is_taken_without_waiting() -> None:
    consumer = FakeConsumer(queued=1200)
    assert len(_taker(consumer)[0].next_batch()) == 500
    assert consumer.calls == [(500, 0)]


def test_an_idle_pipeline_waits_for_one_record_then_drains() -> None:
    consumer = FakeConsumer(arrivals=3)
    assert len(_taker(consumer)[0].next_batch()) == 3
    assert consumer.calls == [(500, 0), (1, 0.1), (499, 0)]


def test_nothing_arriving_waits_batch_timeout_once() -> None:
    consumer = FakeConsumer()
    assert _taker(consumer)[0].next_batch() == []
    assert consumer.calls == [(500, 0), (1, 0.1)]


def test_exactly_once_right_after_a_commit_gathers_until_not_before() -> None:
    consumer = FakeConsumer(queued=10)
    taker, delivery = _taker(consumer)
    delivery.not_before = time.monotonic() + 0.004  # a commit that took 4 ms ended just now
    taker.next_batch()
    (_, first), (n, wait) = consumer.calls
    assert first == 0 and n == 490 and 0 < wait <= 0.004


def test_a_full_batch_goes_at_once_even_right_after_a_commit() -> None:
    consumer = FakeConsumer(queued=700)
    taker, delivery = _taker(consumer)
    delivery.not_before = time.monotonic() + 0.004
    assert len(taker.next_batch()) == 500
    assert consumer.calls == [(500, 0)]


def test_exactly_once_after_a_pause_takes_the_first_record_at_once() -> None:
    consumer = FakeConsumer(queued=1)
    taker, delivery = _taker(consumer)
    delivery.not_before = time.monotonic() - 1.0
    assert len(taker.next_batch()) == 1
    assert consumer.calls == [(500, 0)]


class FakeProducer:
    def produce(self, *args: Any, **kwargs: Any) -> None:
        pass  # acknowledged at once: nothing is ever queued

    def __len__(self) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> int:
        return 0


def test_at_least_once_stores_only_owned_partitions_without_asking_the_consumer() -> None:
    consumer = FakeConsumer()
    delivery = AtLeastOnce(FakeProducer(), consumer, FailedOutputs())  # type: ignore[arg-type]
    delivery.on_assign([TopicPartition("in", 0), TopicPartition("in", 1)])
    delivery.begin_batch()
    delivery.produce("out", b"v", None, [])
    delivery.end_batch({("in", 0): 5, ("in", 1): 7})
    delivery.on_revoke([TopicPartition("in", 1)])
    delivery.begin_batch()
    delivery.end_batch({("in", 0): 9, ("in", 1): 9})
    stored = [[(tp.partition, tp.offset) for tp in batch] for batch in consumer.stored]
    assert stored == [[(0, 5), (1, 7)], [(0, 9)]]
    assert consumer.asked_assignment == 0


def test_at_least_once_asks_the_consumer_before_any_assignment_callback() -> None:
    consumer = FakeConsumer()
    delivery = AtLeastOnce(FakeProducer(), consumer, FailedOutputs())  # type: ignore[arg-type]
    delivery.begin_batch()
    delivery.end_batch({("in", 0): 3, ("in", 2): 4})
    assert [(tp.partition, tp.offset) for tp in consumer.stored[0]] == [(0, 3)]
    assert consumer.asked_assignment == 1
