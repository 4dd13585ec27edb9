"""The in-memory broker: topics, their records in write order, committed offsets.

Also what reads a state changelog back from it (:class:`MemoryChangelog`). The
package's docstring says what the in-memory clients promise.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

__all__ = ["IDLE_POLL_S", "Callback", "Headers", "MemoryBroker", "MemoryChangelog"]

Headers = Sequence[tuple[str, str | bytes | None]]
Callback = Callable[[Any, Any], None]
IDLE_POLL_S = 0.002  # an idle poll naps this long, so a poller thread does not spin


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
        headers: Headers | None = None,
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
