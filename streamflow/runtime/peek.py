"""Peeking at a topic: its latest records, decoded, outside any consumer group.

``streamflow tail`` and the web view both look at what is on a topic without
being one of its consumers: they assign partitions by hand (no group, no
commits, no rebalance of the application's own consumers), seek to the end
minus ``n`` and read up to the end they saw when they started. Decoding does
not trust the port a record came from: the schema comes from the record's
``streamflow-schema`` header, or else from the fingerprint in its
single-object header, so a dead letter of garbage is reported as undecodable
rather than hidden or mis-read.
"""

from __future__ import annotations

import time
from typing import Any, cast

from confluent_kafka import Consumer, Message, TopicPartition

from streamflow.schema import DecodeError, SchemaStore, SingleObjectCodec
from streamflow.schema.codecs import MAGIC

__all__ = ["Decoder", "PeekError", "assign_last", "drain", "header_text", "headers", "last"]


class PeekError(Exception):
    """A topic that cannot be read (it does not exist, the broker refused)."""


class Decoder:
    """Decodes records by their own schema header or fingerprint; caches one codec a schema."""

    def __init__(self, store: SchemaStore) -> None:
        self.store = store
        self._codecs: dict[str, SingleObjectCodec] = {}

    def decode(self, msg: Message) -> tuple[str | None, Any, str | None]:
        """``(schema name, value, error)``: value None and an error when it does not decode."""
        raw = msg.value() or b""
        name = header_text(msg, "streamflow-schema") or self._by_fingerprint(raw)
        if not name or name not in self.store:
            return name or None, None, "no known schema"
        codec = self._codecs.get(name) or SingleObjectCodec(self.store.get(name), store=self.store)
        self._codecs[name] = codec
        try:
            return name, codec.decode(raw), None
        except DecodeError as exc:
            return name, None, str(exc)

    def _by_fingerprint(self, raw: bytes) -> str:
        if len(raw) >= 10 and raw[:2] == MAGIC:
            schema = self.store.by_fingerprint(int.from_bytes(raw[2:10], "little"))
            return schema.name if schema else ""
        return ""


def assign_last(consumer: Consumer, topic: str, n: int, *, timeout: float = 10) -> None:
    """Assign every partition of ``topic``, each at its end minus ``n``."""
    meta = consumer.list_topics(topic, timeout=timeout).topics[topic]
    if meta.error is not None:
        raise PeekError(f"topic {topic!r}: {meta.error.str()}")
    partitions = []
    for p in meta.partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
        partitions.append(TopicPartition(topic, p, max(low, high - n)))
    consumer.assign(partitions)


def drain(consumer: Consumer, *, timeout: float = 30) -> list[Message]:
    """What the assignment holds, up to the ends seen now; later records are not waited for."""
    ends = {}
    for tp in consumer.assignment():
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        ends[tp.partition] = high
    pending = {p for p, high in ends.items() if high > 0}
    records: list[Message] = []
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is not None:
                continue
            records.append(msg)
            partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
            if offset + 1 >= ends[partition]:
                pending.discard(partition)
        # a compacted or transactional partition may end on an offset no record has
        for tp in consumer.position(consumer.assignment()):
            if tp.offset >= ends.get(tp.partition, 0):
                pending.discard(tp.partition)
    return records


def last(consumer: Consumer, topic: str, n: int, *, timeout: float = 30) -> list[Message]:
    """The last ``n`` records of ``topic`` across its partitions, oldest first (by timestamp)."""
    assign_last(consumer, topic, n, timeout=min(timeout, 10))
    records = drain(consumer, timeout=timeout)
    records.sort(key=lambda m: m.timestamp()[1])
    return records[-n:] if n else []


def header_text(msg: Message, name: str) -> str:
    for key, value in msg.headers() or ():  # type: ignore[misc,str-unpack,unused-ignore]
        if key == name:
            return _text(value)
    return ""


def headers(msg: Message) -> dict[str, str]:
    """The record's headers as text (the last one wins when a name repeats)."""
    return {k: _text(v) for k, v in msg.headers() or ()}  # type: ignore[misc,str-unpack,unused-ignore]


def _text(value: str | bytes | None) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")
