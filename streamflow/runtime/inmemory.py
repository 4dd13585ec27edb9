"""Kafka in memory: the consumer and producer the runtime's loops take, without a broker.

The testkit drives the real :class:`~streamflow.runtime.processor.Processor`
(and the source and serve runners) through these, so there is one
implementation of calling logic, routing outputs, dead-lettering and
backpressure; the runtime's own unit tests use them to pin down delivery
tickets, the offset gate and transactions one behaviour at a time.

They speak the subset of confluent-kafka's ``Consumer`` and ``Producer`` that
the runtime calls, with librdkafka's semantics where the runtime depends on
them:

* records are real :class:`confluent_kafka.Message` objects;
* a delivery callback runs only inside ``poll`` or ``flush``, never inside
  ``produce``; a test may hold acknowledgements back (:meth:`MemoryProducer.hold`)
  or fail the next ones (:meth:`MemoryProducer.fail_next`), and a full queue
  raises ``BufferError`` (``queue_limit``);
* a transaction's records and offsets become visible together on commit and
  vanish on abort; a test may make the next transactional call raise;
* ``consume`` honours ``pause``/``resume`` and ``seek``, and the subscription's
  ``on_assign`` runs on the first ``consume``; :meth:`MemoryConsumer.revoke`
  plays a rebalance that takes partitions away, and :meth:`MemoryConsumer.give_back`
  one that returns them;
* a partition paused when a rebalance takes it is still paused when a later one
  gives it back, as librdkafka keeps it under a subscription (cooperative-sticky);
  only ``assign``, outside a group, starts it unpaused.

Everything runs on the caller's thread (the serve runner's poller thread only
calls ``poll``); nothing waits on a clock, except that an idle ``poll(timeout)``
(or a ``flush(timeout)`` of held records) naps for a few milliseconds, so that a
poller thread, or a flush in slices, does not spin.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

__all__ = ["MemoryBroker", "MemoryChangelog", "MemoryConsumer", "MemoryProducer"]

_Headers = Sequence[tuple[str, str | bytes | None]]
_Callback = Callable[[Any, Any], None]
_OFFSET_BEGINNING = -2
_IDLE_POLL_S = 0.002


@dataclass
class _Topic:
    partitions: list[list[Message]]
    written: list[list[int]]  # per record, its place in the broker's write order


@dataclass
class MemoryBroker:
    """Topics, their records in order, and the consumer groups' committed offsets."""

    topics: dict[str, _Topic] = field(default_factory=dict)
    committed: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    _sequence: itertools.count[int] = field(default_factory=itertools.count)
    log: list[Message] = field(default_factory=list)  # every visible record, in write order

    def create_topic(self, name: str, partitions: int = 1) -> None:
        if name not in self.topics:
            self.topics[name] = _Topic(
                [[] for _ in range(partitions)], [[] for _ in range(partitions)]
            )

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: _Headers | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Message:
        """Write one record (creating a one-partition topic on first use); the record."""
        self.create_topic(topic)
        parts = self.topics[topic].partitions
        if partition is None:
            partition = hash(key) % len(parts) if key is not None else 0
        offset = len(parts[partition])
        stamp = timestamp_ms if timestamp_ms is not None else next(self._sequence)
        msg = Message(
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            value=value,
            headers=list(headers) if headers else None,
            timestamp=(1, stamp),
        )
        parts[partition].append(msg)
        self.topics[topic].written[partition].append(len(self.log))
        self.log.append(msg)
        return msg

    def records(self, topic: str) -> list[Message]:
        """Every visible record of ``topic``, partition by partition."""
        found = self.topics.get(topic)
        return [m for part in found.partitions for m in part] if found else []

    def end_offset(self, topic: str, partition: int) -> int:
        return len(self.topics[topic].partitions[partition])


class MemoryConsumer:
    """A consumer of one group that owns every partition of what it subscribes to."""

    def __init__(self, broker: MemoryBroker, *, group: str = "memory") -> None:
        self.broker = broker
        self.group = group
        self.stored: dict[tuple[str, int], int] = {}
        self._topics: list[str] = []
        self._callbacks: dict[str, Callable[..., None] | None] = {}
        self._assigned: list[tuple[str, int]] = []
        self._position: dict[tuple[str, int], int] = {}
        self._paused: set[tuple[str, int]] = set()
        self._needs_assign = False
        self.closed = False

    # -- the confluent-kafka surface -------------------------------------------

    def subscribe(self, topics: list[str], **callbacks: Callable[..., None] | None) -> None:
        self._topics = list(topics)
        self._callbacks = callbacks
        self._needs_assign = True

    def assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._paused.discard((tp.topic, tp.partition))
            self._take(tp.topic, tp.partition, tp.offset)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        if self._needs_assign:
            self._needs_assign = False
            self._assign_subscription()
        # Across partitions, in the order the records were written (as a fetch of a
        # broker whose partitions all have data interleaves them), not one after another.
        live = [w for w in self._assigned if w not in self._paused]
        out: list[Message] = []
        while len(out) < num_messages:
            best: tuple[int, tuple[str, int]] | None = None
            for where in live:
                topic = self.broker.topics[where[0]]
                position = self._position[where]
                if position < len(topic.written[where[1]]):
                    seq = topic.written[where[1]][position]
                    if best is None or seq < best[0]:
                        best = (seq, where)
            if best is None:
                break
            where = best[1]
            out.append(self.broker.topics[where[0]].partitions[where[1]][self._position[where]])
            self._position[where] += 1
        return out

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._assigned]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def seek(self, partition: TopicPartition) -> None:
        where = (partition.topic, partition.partition)
        if where not in self._assigned:  # as librdkafka: only an assigned partition
            raise KafkaException(
                KafkaError(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition")
            )
        self._position[where] = partition.offset

    def store_offsets(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            if (tp.topic, tp.partition) not in self._assigned:
                raise KafkaException(KafkaError(KafkaError._STATE, "partition not assigned"))
            self.stored[(tp.topic, tp.partition)] = tp.offset

    def commit(self, asynchronous: bool = True) -> None:
        committed = self.broker.committed.setdefault(self.group, {})
        fresh = {k: v for k, v in self.stored.items() if committed.get(k) != v}
        if not fresh:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "no offset to commit"))
        committed.update(fresh)

    def consumer_group_metadata(self) -> str:
        return self.group

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        names = [topic] if topic is not None else list(self.broker.topics)
        for name in names:
            self.broker.create_topic(name)
        return SimpleNamespace(
            topics={
                name: SimpleNamespace(
                    error=None,
                    partitions=dict.fromkeys(range(len(self.broker.topics[name].partitions))),
                )
                for name in names
            }
        )

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        return 0, self.broker.end_offset(partition.topic, partition.partition)

    def close(self) -> None:
        self.closed = True

    # -- what a test does to it ------------------------------------------------

    @property
    def lag(self) -> int:
        """Records in the assigned (or, before the first consume, subscribed) partitions
        not yet consumed."""
        if self._needs_assign:
            return sum(len(m) for t in self._topics for m in self._partitions(t))
        return sum(self.broker.end_offset(t, p) - self._position[(t, p)] for t, p in self._assigned)

    @property
    def paused(self) -> bool:
        return bool(self._assigned) and all(w in self._paused for w in self._assigned)

    def position(self, topic: str, partition: int = 0) -> int:
        return self._position[(topic, partition)]

    def revoke(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """A rebalance takes ``partitions`` (all by default): ``on_revoke`` runs first."""
        gone = list(partitions) if partitions is not None else list(self._assigned)
        callback = self._callbacks.get("on_revoke")
        if callback is not None:
            callback(self, [TopicPartition(t, p) for t, p in gone])
        for where in gone:
            self._assigned.remove(where)  # paused or not, it stays so (see the module)
            self.stored.pop(where, None)

    def give_back(self, partitions: Iterable[tuple[str, int]]) -> None:
        """A rebalance gives ``partitions`` back, from the group's committed offsets:
        ``on_assign`` runs once they are taken."""
        back = list(partitions)
        committed = self.broker.committed.get(self.group, {})
        for topic, p in back:
            self._take(topic, p, committed.get((topic, p), _OFFSET_BEGINNING))
        callback = self._callbacks.get("on_assign")
        if callback is not None:
            callback(self, [TopicPartition(t, p) for t, p in back])

    def _partitions(self, topic: str) -> list[list[Message]]:
        self.broker.create_topic(topic)
        return self.broker.topics[topic].partitions

    def _assign_subscription(self) -> None:
        self.give_back(
            [(topic, p) for topic in self._topics for p in range(len(self._partitions(topic)))]
        )

    def _take(self, topic: str, partition: int, offset: int) -> None:
        self._partitions(topic)
        if (topic, partition) not in self._assigned:
            self._assigned.append((topic, partition))
        self._position[(topic, partition)] = max(offset, 0)


@dataclass
class _Sent:
    topic: str
    value: bytes | None
    key: bytes | None
    headers: _Headers | None
    callback: _Callback | None
    partition: int | None = None


class MemoryProducer:
    """A producer whose acknowledgements a test controls; transactional when asked."""

    def __init__(
        self,
        broker: MemoryBroker,
        *,
        queue_limit: int = 100_000,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """``config`` may hold ``on_delivery`` (for records produced without a callback of
        their own) and ``delivery.report.only.error``, as confluent-kafka's does."""
        self.broker = broker
        self.queue_limit = queue_limit
        config = config or {}
        self._default_callback: _Callback | None = config.get("on_delivery")
        self._only_errors = bool(config.get("delivery.report.only.error", False))
        self._in_flight: deque[_Sent] = deque()
        self._held = False
        self._failures: deque[KafkaError] = deque()
        self._transactional = False
        self._txn: list[_Sent] | None = None
        self._txn_offsets: tuple[str, list[TopicPartition]] | None = None
        self._txn_failures: dict[str, KafkaException] = {}
        self._txn_lost: KafkaError | None = None
        self.transactions = {"committed": 0, "aborted": 0}

    # -- the confluent-kafka surface -------------------------------------------

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: _Headers | None = None,
        on_delivery: _Callback | None = None,
        partition: int = -1,
    ) -> None:
        if len(self._in_flight) >= self.queue_limit:
            raise BufferError("Local: Queue full")
        if self._transactional and self._txn is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        chosen = partition if partition >= 0 else None
        self._in_flight.append(_Sent(topic, value, key, headers, on_delivery, chosen))

    def poll(self, timeout: float = 0) -> int:
        delivered = self._deliver()
        if not delivered and timeout > 0:
            time.sleep(min(timeout, _IDLE_POLL_S))  # a poller thread must not spin
        return delivered

    def flush(self, timeout: float = -1) -> int:
        if not self._deliver() and self._in_flight and timeout > 0:
            time.sleep(min(timeout, _IDLE_POLL_S))  # held: a flush in slices must not spin
        return len(self._in_flight)

    def __len__(self) -> int:
        return len(self._in_flight)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """The broker always answers: it is in memory."""
        return SimpleNamespace(brokers={1: "memory"}, topics=dict.fromkeys(self.broker.topics))

    def init_transactions(self, timeout: float = -1) -> None:
        self._transactional = True

    def begin_transaction(self) -> None:
        self._fail_if_asked("begin_transaction")
        if self._txn is not None:
            raise KafkaException(KafkaError(KafkaError._STATE, "a transaction is already open"))
        self._txn = []
        self._txn_offsets = None
        self._txn_lost = None

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None:
        self._fail_if_asked("send_offsets_to_transaction")
        self._txn_offsets = (str(group_metadata), list(positions))

    def commit_transaction(self, timeout: float = -1) -> None:
        self._fail_if_asked("commit_transaction")
        if self._txn is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        self._deliver(ignore_hold=True)
        if self._txn_lost is not None:  # librdkafka: an abortable error, the batch is redone
            raise KafkaException(self._txn_lost)
        for sent in self._txn:
            self.broker.append(
                sent.topic, sent.value, sent.key, sent.headers, partition=sent.partition
            )
        if self._txn_offsets is not None:
            group, positions = self._txn_offsets
            committed = self.broker.committed.setdefault(group, {})
            committed.update({(tp.topic, tp.partition): tp.offset for tp in positions})
        self._txn = None
        self.transactions["committed"] += 1

    def abort_transaction(self, timeout: float = -1) -> None:
        self._fail_if_asked("abort_transaction")
        self._in_flight.clear()
        self._txn = None
        self._txn_offsets = None
        self.transactions["aborted"] += 1

    # -- what a test does to it ------------------------------------------------

    def hold(self) -> None:
        """Acknowledge nothing until :meth:`release`: outputs stay in flight."""
        self._held = True

    def release(self) -> None:
        self._held = False

    def fail_next(self, count: int = 1, *, reason: str = "Local: Message timed out") -> None:
        """The next ``count`` deliveries fail with a delivery error."""
        self._failures.extend(KafkaError(KafkaError._MSG_TIMED_OUT, reason) for _ in range(count))

    def fail_call(self, name: str, exc: KafkaException) -> None:
        """The next call of the transactional method ``name`` raises ``exc``."""
        self._txn_failures[name] = exc

    @property
    def open_transaction(self) -> bool:
        return self._txn is not None

    def _fail_if_asked(self, name: str) -> None:
        exc = self._txn_failures.pop(name, None)
        if exc is not None:
            raise exc

    def _deliver(self, *, ignore_hold: bool = False) -> int:
        if self._held and not ignore_hold:
            return 0
        delivered = 0
        while self._in_flight:
            sent = self._in_flight.popleft()
            error = self._failures.popleft() if self._failures else None
            msg: Message | None = None
            if error is not None:
                # as librdkafka's: the record that failed, with the error, at no offset
                msg = Message(
                    topic=sent.topic,
                    partition=-1,
                    offset=-1001,
                    key=sent.key,
                    value=sent.value,
                    headers=list(sent.headers) if sent.headers else None,
                    error=error,
                )
                if self._txn is not None:
                    self._txn_lost = error
            else:
                if self._txn is not None:
                    self._txn.append(sent)
                else:
                    msg = self.broker.append(
                        sent.topic, sent.value, sent.key, sent.headers, partition=sent.partition
                    )
            callback = sent.callback or self._default_callback
            if callback is not None and (error is not None or not self._only_errors):
                callback(error, msg)
            delivered += 1
        return delivered


class MemoryChangelog:
    """Reads state changelogs back from a :class:`MemoryBroker` (``state.ChangelogReader``)."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        found = self.broker.topics.get(topic)
        return (0, len(found.partitions[partition])) if found else (0, 0)

    def identity(self, topic: str) -> str:
        found = self.broker.topics.get(topic)
        return f"{topic}@{id(found):x}" if found else ""

    def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[bytes, bytes | None]]:
        found = self.broker.topics.get(topic)
        for msg in found.partitions[partition][start:end] if found else []:
            key = msg.key()
            if key is not None:
                yield key, msg.value()
