"""A partition a rebalance took while the streamlet held data back is read when it returns.

librdkafka keeps a partition's pause through a cooperative revoke and a later
assignment. A replica whose model was still loading when a rebalance took some of
its partitions got them back later still paused, and never read them again: a chaos
run (a model switch after a broker ``kill -9``, on a loaded machine) lost 363 of
2,400 predictions that way. The unit tests in ``test_processor_units.py`` pin the
rule down over Kafka in memory, whose consumer keeps the pause as librdkafka does;
this one drives the real loop through librdkafka's own group protocol.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from streamflow.api.descriptor import describe
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.delivery import AtLeastOnce, FailedOutputs
from streamflow.runtime.health import HealthState
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.processor import Processor
from tests.runtime import memory_support
from tests.runtime.memory_support import Gated
from tests.waiting import wait_until

PARTITIONS = 4
N = 40


def _turn_until(processor: Processor, done: Callable[[], bool], what: str, *also: Consumer) -> None:
    """Turn the processor (and poll ``also``) until ``done``: its turns are the waiting."""

    def turned() -> bool:
        if done():
            return True
        processor.turn()
        for consumer in also:  # a group member only takes part in a rebalance when polled
            consumer.consume(10, 0.05)
        return False

    wait_until(turned, what=what, timeout=60, interval=0)


def test_partitions_revoked_while_paused_are_read_when_they_come_back(
    kafka_bootstrap: str,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    inp, out, dlq = f"in-{suffix}", f"out-{suffix}", f"dlq-{suffix}"
    clients = KafkaClients(bootstrap=kafka_bootstrap)
    admin = clients.admin()
    created = admin.create_topics(
        [NewTopic(inp, PARTITIONS, 1), NewTopic(out, 1, 1), NewTopic(dlq, 1, 1)]
    )
    for future in created.values():
        future.result(30)
    group = f"paused-{suffix}"
    consumer = clients.consumer(group=group, client_id="gated.0")
    failures = FailedOutputs()
    producer = clients.producer(client_id="gated.0", **failures.producer_config())
    streamlet = Gated()
    loop = asyncio.new_event_loop()
    processor = Processor(
        streamlet=streamlet,
        descriptor=describe(Gated),
        bindings=memory_support.bindings(inp=inp, out=out, dlq=dlq),
        consumer=consumer,
        delivery=AtLeastOnce(producer, consumer, failures),
        metrics=Metrics(app="app", streamlet="gated", replica=0),
        health=HealthState(),
        control=None,
        loop=loop,
        stop=threading.Event(),
        batch_size=100,
        batch_timeout=0.05,
    )
    other = clients.consumer(group=group, client_id="gated.1", **{"enable.auto.commit": False})
    try:
        processor.start()
        _turn_until(processor, lambda: len(consumer.assignment()) == PARTITIONS, "the assignment")
        processor.turn()  # no model yet: the turn after the assignment pauses all of it
        other.subscribe([inp])  # a second replica takes half, paused as they are
        _turn_until(
            processor,
            lambda: (
                len(consumer.assignment()) == PARTITIONS // 2
                and len(other.assignment()) == PARTITIONS // 2
            ),
            "the second member to take half",
            other,
        )
        taken = sorted(tp.partition for tp in other.assignment())
        streamlet.ready = True  # the model is loaded: what the replica owns now is resumed
        processor.turn()
        other.close()  # the second replica leaves: its partitions come back
        _turn_until(processor, lambda: len(consumer.assignment()) == PARTITIONS, "them back")
        writer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i in range(N):
            value = json.dumps({"id": f"r{i}"}).encode()
            writer.produce(inp, value, f"r{i}".encode(), partition=i % PARTITIONS)
        assert writer.flush(30) == 0
        ids = {f"r{i}" for i in range(N)}
        try:
            _turn_until(processor, lambda: streamlet.seen == ids, "every record")
        except AssertionError as exc:
            unread = sorted({int(i[1:]) % PARTITIONS for i in ids - streamlet.seen})
            raise AssertionError(
                f"{exc}: partitions {unread} were never read (the second member had {taken})"
            ) from None
    finally:
        processor.delivery.close()
        consumer.close()
        loop.close()
