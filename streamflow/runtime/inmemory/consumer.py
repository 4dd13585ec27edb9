"""The in-memory consumer: a group member whose rebalances a test plays out."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streamflow.runtime.inmemory.broker import MemoryBroker

__all__ = ["MemoryConsumer"]

_OFFSET_BEGINNING = -2


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
