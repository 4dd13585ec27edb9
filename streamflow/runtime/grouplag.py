"""How far a consumer group is behind on its topics, as Kafka itself records it.

Autoscaling needs the lag of a streamlet's input even when none of its
replicas runs (scaled to zero, crashed, rebalancing), so it is read from the
broker, not from the replicas' metrics: the group's committed offsets against
the partitions' end offsets, through the admin client, as KEDA's Kafka scaler
reads it. A partition the group never committed counts from its earliest
offset, since replicas start there (``auto.offset.reset=earliest``).

The group is described before its offsets are listed. librdkafka (2.x) parses
an admin client's ListConsumerGroupOffsets answer with the consumer's
OffsetFetch code, which on a coordinator that is still loading
(``COORDINATOR_LOAD_IN_PROGRESS``, the first use of ``__consumer_offsets``)
hands the retry to the client's consumer group, and an admin client has none:
the process dies of a segmentation fault in ``rd_kafka_cgrp_op``. Describing
the group first asks the same coordinator through a parser without that path:
a coordinator that is loading then fails the measurement cleanly (the next
tick measures again), a group the coordinator does not know has committed
nothing, and only a group it knows has its offsets listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
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
        committed = (
            _committed(admin, group, partitions, timeout) if _known(admin, group, timeout) else {}
        )
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


def _known(admin: Any, group: str, timeout: float) -> bool:
    """Whether the group's coordinator knows it (and has loaded its offsets); see the module."""
    described = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result()
    return described.state not in (ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)


def _committed(
    admin: Any, group: str, partitions: list[TopicPartition], timeout: float
) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group, partitions)]
    future = admin.list_consumer_group_offsets(request, request_timeout=timeout)[group]
    return {(tp.topic, tp.partition): tp.offset for tp in future.result().topic_partitions}


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
