"""The changelog topics on Kafka: created compacted beside the inlets, read back on restore.

Each data inlet of a stateful streamlet has one changelog topic,
``<app>.<streamlet>.<inlet>.changelog``, with as many partitions as the inlet's
topic: the store of inlet partition *p* is changelog partition *p*, so the
replica that is assigned *p* is the only writer of it. Compaction keeps the
newest value of every key (and a deletion until it has been read by everyone
for a day), so what a restore reads is bounded by the state's size, not its
history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka import admin as kafka_admin
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # stubs omit it

from streamflow.api.state import StateError
from streamflow.runtime.clients import KafkaClients, retry_transient

__all__ = ["KafkaChangelog", "ensure_changelogs"]

_OffsetSpec: Any = kafka_admin.OffsetSpec  # type: ignore[attr-defined]  # not in the stubs
_IsolationLevel: Any = confluent_kafka.IsolationLevel
_TIMEOUT_S = 30.0
_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "segment.ms": "600000"}


def ensure_changelogs(admin: Any, topics: Mapping[str, tuple[int, int]]) -> list[str]:
    """Create the changelog topics that are missing: name -> (partitions, replication).

    Returns the ones created. One that exists with another partition count is an
    error, since partition *p*'s state would then be read by the wrong owner.
    """
    metadata = admin.list_topics(timeout=_TIMEOUT_S)
    created, problems = [], []
    missing = []
    for name, (partitions, replication) in topics.items():
        found = metadata.topics.get(name)
        if found is None or found.error is not None:
            missing.append(NewTopic(name, partitions, replication, config=dict(_CONFIG)))
        elif len(found.partitions) != partitions:
            problems.append(
                f"{name} has {len(found.partitions)} partitions, its inlet {partitions}: "
                "delete it (the state is rebuilt from the inlet only by reprocessing) or "
                "give the inlet's topic as many"
            )
    futures = admin.create_topics(missing, operation_timeout=_TIMEOUT_S) if missing else {}
    for name, future in futures.items():
        try:
            future.result(timeout=_TIMEOUT_S)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a peer made it first
                problems.append(f"{name}: {exc.args[0].str()}")
    if problems:
        raise StateError("the state's changelog topics are not usable: " + "; ".join(problems))
    _wait_for_leaders(admin, created)
    return created


def _wait_for_leaders(admin: Any, names: list[str]) -> None:
    """Until every partition of the topics just made has a leader: a restore that asks for
    their offsets sooner is told the topic is unknown (seen on a broker just started)."""
    deadline = time.monotonic() + _TIMEOUT_S
    waiting = set(names)
    while waiting and time.monotonic() < deadline:
        topics = admin.list_topics(timeout=_TIMEOUT_S).topics
        for name in list(waiting):
            found = topics.get(name)
            if (
                found is not None
                and found.error is None
                and found.partitions
                and all(p.leader >= 0 for p in found.partitions.values())
            ):
                waiting.discard(name)
        if waiting:
            time.sleep(0.1)


_T = TypeVar("_T")


def _retrying(what: str, call: Callable[[], _T]) -> _T:
    """``call()``, again while Kafka's answer is transient, for up to ``_TIMEOUT_S``."""
    try:
        return retry_transient(call, timeout_s=_TIMEOUT_S)
    except KafkaException as exc:
        raise StateError(f"cannot read {what}: {exc.args[0].str()}") from None


class KafkaChangelog:
    """Reads changelog partitions back (``manager.ChangelogReader``), read_committed."""

    def __init__(self, clients: KafkaClients, *, client_id: str, timeout_s: float = 300.0) -> None:
        self._clients = clients
        self._client_id = client_id
        self._admin = clients.admin()
        self._timeout_s = timeout_s

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        tp = TopicPartition(topic, partition)
        committed = _IsolationLevel.READ_COMMITTED

        def offset(spec: Any) -> int:
            futures = self._admin.list_offsets(
                {tp: spec}, isolation_level=committed, request_timeout=_TIMEOUT_S
            )
            return int(futures[tp].result(timeout=_TIMEOUT_S).offset)

        where = f"the offsets of {topic}[{partition}]"
        return (
            _retrying(where, lambda: offset(_OffsetSpec.earliest())),
            _retrying(where, lambda: offset(_OffsetSpec.latest())),
        )

    def identity(self, topic: str) -> str:
        def describe() -> str:
            collection = TopicCollection([topic])
            futures = self._admin.describe_topics(collection, request_timeout=_TIMEOUT_S)
            return str(futures[topic].result(timeout=_TIMEOUT_S).topic_id)

        return _retrying(f"the id of {topic}", describe)

    def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[bytes, bytes | None]]:
        if start >= end:
            return
        consumer = self._clients.reader(
            client_id=f"{self._client_id}.restore", **{"enable.partition.eof": True}
        )
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self._timeout_s
        try:
            position = start
            while position < end:
                if time.monotonic() > deadline:
                    raise StateError(
                        f"restoring {topic}[{partition}] took more than {self._timeout_s:.0f}s: "
                        f"at offset {position} of {end}"
                    )
                messages = consumer.consume(1000, 0.5)
                for msg in messages:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            return  # the end a read_committed reader sees, markers and all
                        raise StateError(f"reading {topic}[{partition}]: {error.str()}")
                    offset: int = msg.offset()  # type: ignore[assignment]
                    if offset >= end:
                        return
                    key = msg.key()
                    if key is not None:
                        yield key, msg.value()
                    position = offset + 1
                if not messages:
                    # transaction markers take offsets but are never returned: ask where it is
                    found = consumer.position([TopicPartition(topic, partition)])[0].offset
                    position = max(position, found)
        finally:
            consumer.close()
