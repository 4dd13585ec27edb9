"""How far a consumer group is behind on its topics, as Kafka itself records it.

Autoscaling needs the lag of a streamlet's input even when none of its
replicas runs (scaled to zero, crashed, rebalancing), so it is read from the
broker, not from the replicas' metrics: the group's committed offsets against
the partitions' end offsets, through the admin client, as KEDA's Kafka scaler
reads it. A partition the group never committed counts from its earliest
offset, since replicas start there (``auto.offset.reset=earliest``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka import admin as kafka_admin

_OffsetSpec: Any = kafka_admin.OffsetSpec  # type: ignore[attr-defined]  # not in the stubs

__all__ = ["GroupLag", "GroupLagError", "measure"]


class GroupLagError(Exception):
    """The offsets could not be read (Kafka unreachable, a topic missing)."""


@dataclass(frozen=True)
class GroupLag:
    lag: int  # records behind, summed over the partitions
    produced: int  # end offsets, summed
    consumed: int  # the group's position (committed, else earliest), summed
    partitions: int  # how many partitions were measured


def measure(admin: Any, *, group: str, topics: list[str], timeout: float = 10.0) -> GroupLag:
    """The lag of ``group`` on ``topics`` now; GroupLagError when Kafka cannot say."""
    try:
        metadata = admin.list_topics(timeout=timeout)
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(_partitions(metadata, topic))
        ]
        if not partitions:
            return GroupLag(0, 0, 0, 0)
        ends = _offsets(admin, partitions, _OffsetSpec.latest(), timeout)
        starts = _offsets(admin, partitions, _OffsetSpec.earliest(), timeout)
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        future = admin.list_consumer_group_offsets(request, request_timeout=timeout)[group]
        committed = {(tp.topic, tp.partition): tp.offset for tp in future.result().topic_partitions}
    except KafkaException as exc:
        raise GroupLagError(f"cannot read the offsets of {group!r}: {exc}") from None
    lag = produced = consumed = 0
    for tp in partitions:
        key = (tp.topic, tp.partition)
        end, start = ends[key], starts[key]
        position = committed.get(key, -1)
        position = start if position < 0 else min(max(position, start), end)
        produced += end
        consumed += position
        lag += end - position
    return GroupLag(lag=lag, produced=produced, consumed=consumed, partitions=len(partitions))


def _partitions(metadata: Any, topic: str) -> list[int]:
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise GroupLagError(f"topic {topic!r} does not exist (yet)")
    return list(found.partitions)


def _offsets(
    admin: Any, partitions: list[TopicPartition], spec: Any, timeout: float
) -> dict[tuple[str, int], int]:
    futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=timeout)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
