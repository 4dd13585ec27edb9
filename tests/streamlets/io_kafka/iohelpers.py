"""Helpers for the I/O end-to-end tests: apps over ``ioapps``, files, logs, HTTP ports.

The generic ones (replica processes, consuming a topic, waiting on a
condition) are the runtime tests' own, re-exported from ``tests.runtime.support``.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streamflow.blueprint.model import Application
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.topics import ensure_topics
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.runtime.support import (
    Replicas,
    consume_until,
    count_at_least,
    produce,
    replicas,
)
from tests.waiting import wait_until

__all__ = [
    "EVENT",
    "HERE",
    "Application",
    "Replicas",
    "bound_port",
    "codec",
    "committed",
    "consume_until",
    "count_at_least",
    "create_topics",
    "event",
    "jsonl",
    "make_app",
    "port_accepts",
    "produce",
    "read_topic",
    "replicas",
    "topic",
    "wait",
]

HERE = Path(__file__).parent
SCHEMAS = HERE / "schemas"
EVENT = "iokafka.Event"
STORE = SchemaStore([SCHEMAS])


def codec(name: str = EVENT, store: SchemaStore = STORE) -> SingleObjectCodec:
    return SingleObjectCodec(store.get(name), store=store)


def make_app(
    bootstrap: str,
    *,
    streamlets: dict[str, dict[str, Any]],
    topics: dict[str, dict[str, Any]],
) -> Application:
    """An app of ``ioapps`` streamlets with a unique name and unique topics, topics created.

    Topic names get the app's suffix; find them with :func:`topic`.
    """
    suffix = uuid.uuid4().hex[:8]
    app = Application.from_dict(
        {
            "name": f"io{suffix}",
            "schema_paths": [str(SCHEMAS)],
            "python_paths": [str(HERE)],
            "kafka": {"bootstrap": bootstrap, "config": {}},
            "streamlets": streamlets,
            "topics": {f"{name}-{suffix}": spec for name, spec in topics.items()},
        }
    )
    create_topics(bootstrap, app)
    return app


def create_topics(bootstrap: str, app: Application) -> None:
    """The app's topics and dead-letter topics, as ``streamflow run`` creates them."""
    ensure_topics(KafkaClients(bootstrap=bootstrap).admin(), app)


def wait(running: Replicas, condition: Callable[[], bool], *, timeout: float, message: str) -> None:
    """:func:`wait_until`, with the replicas' recent log in the failure."""
    wait_until(
        condition,
        what=message,
        timeout=timeout,
        explain=lambda: f"--- replica log ---\n{running.log()}",
    )


def topic(app: Application, prefix: str) -> str:
    return next(name for name in app.topics if name.startswith(prefix + "-"))


def event(seq: int, value: float | None = None) -> dict[str, Any]:
    """An event with a deterministic uuid, so a test can name it from its seq."""
    ident = str(uuid.UUID(int=seq + 1, version=4))
    return {"id": ident, "seq": seq, "value": float(seq) if value is None else value}


def jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSONL file being appended to (a torn last line is left out)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")[:-1]  # whatever follows the last newline is still being written
    return [json.loads(line) for line in lines if line]


def bound_port(running: Replicas, replica: str) -> int | None:
    """The port a replica's HTTP ingress logged as bound, once it has."""
    for line in list(running.lines):
        if line.startswith(f"{replica}| ") and (
            m := re.search(r"listening on http://\S+:(\d+)", line)
        ):
            return int(m.group(1))
    return None


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


# What a partition of a topic made a moment ago answers until its leader is known.
_NOT_YET = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


def _watermarks(consumer: Consumer, partition: TopicPartition) -> tuple[int, int]:
    """The partition's low and high offsets, asked again while its leader is not known yet
    (a loaded machine was seen answering NOT_LEADER_FOR_PARTITION for a new topic)."""

    def ask() -> tuple[int, int] | None:
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=10)
        except KafkaException as exc:
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() in _NOT_YET:
                return None
            raise
        return int(low), int(high)

    where = f"{partition.topic}[{partition.partition}]"
    return wait_until(ask, what=f"the offsets of {where}", timeout=30)


def read_topic(bootstrap: str, topic_name: str, *, timeout: float = 30.0) -> list[Message]:
    """Every record of a topic up to its end as of now, in offset order per partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        meta = consumer.list_topics(topic_name, timeout=10).topics[topic_name]
        ends = {}
        for p in meta.partitions:
            low, high = _watermarks(consumer, TopicPartition(topic_name, p))
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic_name, p, 0) for p in ends])
        records: list[Message] = []
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    records.append(msg)
            for tp in consumer.position([TopicPartition(topic_name, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        if ends:
            raise AssertionError(f"could not read {topic_name} to its end in {timeout:.0f}s")
        return records
    finally:
        consumer.close()


def committed(consumer: Consumer, topic_name: str, partition: int = 0) -> int:
    """The group's committed offset of a partition (0 when nothing is committed yet).

    The group coordinator may still be moving or loading (NOT_COORDINATOR): asked again.
    """
    deadline = time.monotonic() + 20
    while True:
        try:
            [tp] = consumer.committed([TopicPartition(topic_name, partition)], timeout=10)
            return max(tp.offset, 0)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise
            error = exc.args[0]
            if not (error.retriable() or error.code() in _COORDINATOR_MOVING):
                raise
            time.sleep(0.1)  # a retry interval, not a synchronisation


_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)
