"""A control reader outlives a consumer that stopped fetching (librdkafka#5153).

A replica whose control consumer stops fetching after a broker restart would serve its
old model for good. The unit tests drive the reader through in-memory consumers and a
clock of their own; the broker tests stop the real consumer the way the issue does (it
fetches nothing more) and check what an attacker of the guard would: a transaction left
open, or a partition whose last offsets are a transaction's marker, is not a stall.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from streamflow.api.streamlet import Record
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.control import STALLED_AFTER_S, ControlInletBinding, ControlReader
from streamflow.runtime.inmemory import MemoryBroker, MemoryConsumer
from tests.runtime import support
from tests.waiting import wait_until

FACTOR = support.codec("tests.runtime.Factor")


def _factor(version: int) -> bytes:
    return FACTOR.encode({"version": version, "factor": float(version)})


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Applied:
    def __init__(self) -> None:
        self.versions: list[int] = []
        self.rejected: list[Exception] = []

    def apply(self, record: Record) -> None:
        self.versions.append(record.value["version"])

    def reject(self, msg: Message, inlet: str, exc: Exception) -> None:
        self.rejected.append(exc)

    def poll(self, reader: ControlReader) -> int:
        return reader.poll(apply=self.apply, reject=self.reject)


class _Memory:
    """A control topic of 2 partitions in memory, and the consumers the reader made."""

    def __init__(self, *, stuck_from: int = 1) -> None:
        self.broker = MemoryBroker()
        self.broker.create_topic("ctl", partitions=2)
        self.consumers: list[MemoryConsumer] = []
        self.stuck_from = stuck_from  # consumers made from this one on fetch nothing
        self.clock = _Clock()
        self.applied = _Applied()
        self.reader = ControlReader(
            consumer=self.make(),
            bindings=[ControlInletBinding("factor", "ctl", FACTOR)],
            make_consumer=self.make,
            clock=self.clock,
        )

    def make(self) -> Consumer:
        consumer = _StuckConsumer(self.broker) if len(self.consumers) >= self.stuck_from else None
        made = consumer or MemoryConsumer(self.broker, group="control")
        self.consumers.append(made)
        return cast(Consumer, made)

    def write(self, version: int, partition: int) -> None:
        self.broker.append("ctl", _factor(version), b"f", partition=partition)

    def start(self) -> None:
        self.reader.assign()
        self.reader.catch_up(apply=self.applied.apply, reject=self.applied.reject)

    def stall(self) -> None:
        """The consumer in use stops fetching, as librdkafka's does after some restarts."""
        consumer = self.consumers[-1]
        consumer.pause(consumer.assignment())

    def idle(self, seconds: float) -> int:
        self.clock.now += seconds
        return self.applied.poll(self.reader)


class _StuckConsumer(MemoryConsumer):
    """A consumer that fetches nothing at all: made again, the stall would not clear."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        return []


def test_a_control_consumer_that_stopped_fetching_is_made_again_where_it_stood() -> None:
    memory = _Memory(stuck_from=99)
    memory.write(1, partition=0)
    memory.write(2, partition=1)
    memory.start()
    assert memory.applied.versions == [1, 2]
    memory.stall()
    memory.write(3, partition=1)
    assert memory.idle(STALLED_AFTER_S - 1) == 0, "too soon to judge"
    assert memory.reader.remade == []
    memory.idle(1)  # 30 s without moving, and version 3 waits: a new consumer
    assert memory.reader.remade == [{("ctl", 0): 1, ("ctl", 1): 1}]
    assert memory.consumers[0].closed
    assert memory.idle(0) == 1
    assert memory.applied.versions == [1, 2, 3], "each descriptor applied once"


def test_a_reader_at_the_end_is_not_made_again() -> None:
    memory = _Memory()
    memory.write(1, partition=0)
    memory.start()
    for _ in range(3):
        memory.idle(STALLED_AFTER_S)
    assert memory.reader.remade == []
    assert len(memory.consumers) == 1


def test_a_reader_is_made_again_once_where_a_new_consumer_fetches_nothing_either() -> None:
    memory = _Memory(stuck_from=1)  # every consumer made again is stuck too
    memory.write(1, partition=0)
    memory.start()
    memory.stall()
    memory.write(2, partition=0)
    for _ in range(4):
        memory.idle(STALLED_AFTER_S)
    assert len(memory.reader.remade) == 1, "no new consumer every 30 s when it cannot help"
    assert memory.applied.versions == [1]


def test_a_broker_that_cannot_say_where_a_partition_ends_is_not_a_stall() -> None:
    memory = _Memory()
    memory.write(1, partition=0)
    memory.start()
    memory.stall()
    memory.write(2, partition=0)

    def away(partition: TopicPartition, timeout: float = -1, cached: bool = False) -> Any:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Local: Broker transport failure"))

    memory.consumers[0].get_watermark_offsets = away  # type: ignore[method-assign]
    memory.idle(STALLED_AFTER_S)
    assert memory.reader.remade == []


# -- on the broker -----------------------------------------------------------------


@pytest.fixture
def control(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> Iterator[tuple[str, ControlReader, _Applied]]:
    topic = topic_factory("ctl-stall", partitions=2)
    reader = ControlReader.connect(
        clients=KafkaClients(bootstrap=kafka_bootstrap),
        bindings=[ControlInletBinding("factor", topic, FACTOR)],
        client_id="ctl-stall",
    )
    reader.assign()
    yield topic, reader, _Applied()
    reader.close()


def _send(bootstrap: str, topic: str, versions: range, producer: Producer | None = None) -> None:
    producer = producer or Producer({"bootstrap.servers": bootstrap})
    for v in versions:
        producer.produce(topic, _factor(v), b"f", partition=v % 2)
    assert producer.flush(30) == 0


def _poll_until(
    reader: ControlReader, applied: _Applied, done: Callable[[], bool], message: str
) -> None:
    wait_until(lambda: applied.poll(reader) >= 0 and done(), timeout=60, what=message)


def _idle_check(reader: ControlReader, applied: _Applied) -> None:
    """Poll until the reader has asked once more whether it is behind."""
    before = reader._moved_at
    _poll_until(reader, applied, lambda: reader._moved_at != before, "an idle check")


def test_a_stopped_control_consumer_on_the_broker_is_made_again_and_reads_on(
    kafka_bootstrap: str, control: tuple[str, ControlReader, _Applied]
) -> None:
    topic, reader, applied = control
    _send(kafka_bootstrap, topic, range(1, 5))
    reader.catch_up(apply=applied.apply, reject=applied.reject)
    assert sorted(applied.versions) == [1, 2, 3, 4]
    reader.stalled_after_s = 0.5
    reader._consumer.pause(reader._consumer.assignment())
    _send(kafka_bootstrap, topic, range(5, 9))
    _poll_until(
        reader, applied, lambda: len(applied.versions) == 8, "the descriptors sent after the stall"
    )
    assert reader.remade, "the stopped consumer was made again"
    assert sorted(applied.versions) == list(range(1, 9)), "each applied once"


def test_transaction_markers_and_an_open_transaction_are_not_a_stall(
    kafka_bootstrap: str, control: tuple[str, ControlReader, _Applied]
) -> None:
    topic, reader, applied = control
    committing = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    committing.init_transactions(30)
    committing.begin_transaction()
    _send(kafka_bootstrap, topic, range(1, 3), committing)
    committing.commit_transaction(30)  # each partition now ends with a marker
    reader.catch_up(apply=applied.apply, reject=applied.reject)
    _poll_until(
        reader,
        applied,
        lambda: reader._position == {(topic, 0): 2, (topic, 1): 2},
        "the reader at each partition's end (a record, then its marker)",
    )
    left_open = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-o"})
    left_open.init_transactions(30)
    left_open.begin_transaction()
    _send(kafka_bootstrap, topic, range(3, 5), left_open)  # never committed
    reader.stalled_after_s = 0.5
    for _ in range(3):
        _idle_check(reader, applied)
    assert reader.remade == [], "not behind: the stable end stops at the open transaction"
    assert sorted(applied.versions) == [1, 2]
    left_open.abort_transaction(30)
