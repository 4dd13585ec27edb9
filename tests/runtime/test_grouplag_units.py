"""The lag reader asks for a group's offsets only when the group's coordinator knows it.

librdkafka crashes the process (a segmentation fault in ``rd_kafka_cgrp_op``)
when an admin client's ListConsumerGroupOffsets meets a coordinator that is
still loading; describing the group first keeps the admin client off that path
(see :mod:`streamflow.runtime.grouplag`). These fakes stand for the admin client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition

from streamflow.runtime import grouplag


class _Done:
    def __init__(self, value: Any = None, error: KafkaException | None = None) -> None:
        self.value, self.error = value, error

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


@dataclass
class FakeAdmin:
    state: ConsumerGroupState
    committed: dict[int, int] = field(default_factory=dict)
    describe_error: KafkaException | None = None
    listed: int = 0  # ListConsumerGroupOffsets calls

    def list_topics(self, timeout: float) -> Any:
        partitions = {0: object(), 1: object()}
        topic = type("T", (), {"partitions": partitions, "error": None})()
        return type("M", (), {"topics": {"in": topic}})()

    def list_offsets(self, request: dict[TopicPartition, Any], **_: Any) -> dict[Any, _Done]:
        latest = "latest" in repr(next(iter(request.values()))).lower()
        offset = 100 if latest else 0
        return {tp: _Done(type("O", (), {"offset": offset})()) for tp in request}

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, _Done]:
        described = type("D", (), {"state": self.state})()
        return {groups[0]: _Done(described, self.describe_error)}

    def list_consumer_group_offsets(self, request: list[Any], **_: Any) -> dict[str, _Done]:
        self.listed += 1
        parts = [TopicPartition("in", p, o) for p, o in self.committed.items()]
        return {request[0].group_id: _Done(type("R", (), {"topic_partitions": parts})())}


def test_a_group_its_coordinator_does_not_know_lags_from_the_start_unasked() -> None:
    admin = FakeAdmin(ConsumerGroupState.DEAD)
    lag = grouplag.measure(admin, group="g", topics=["in"])
    assert (lag.lag, lag.produced, lag.consumed, lag.partitions) == (200, 200, 0, 2)
    assert admin.listed == 0  # never the crashing call for an unknown group


def test_a_known_group_has_its_committed_offsets_read() -> None:
    admin = FakeAdmin(ConsumerGroupState.EMPTY, committed={0: 60, 1: 100})
    lag = grouplag.measure(admin, group="g", topics=["in"])
    assert (lag.lag, lag.consumed, admin.listed) == (40, 160, 1)


def test_a_loading_coordinator_fails_the_measurement_cleanly() -> None:
    loading = KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    admin = FakeAdmin(ConsumerGroupState.UNKNOWN, describe_error=loading)
    with pytest.raises(grouplag.GroupLagError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        grouplag.measure(admin, group="g", topics=["in"])
    assert admin.listed == 0
