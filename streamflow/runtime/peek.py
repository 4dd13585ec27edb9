"""Peeking at a topic: its latest records, decoded, outside any consumer group.

``streamflow tail`` and the web view both look at what is on a topic without
being one of its consumers: they assign partitions by hand (no group, no
commits, no rebalance of the application's own consumers), seek to the end
minus ``n`` and read up to the end they saw when they started.

Decoding does not trust the port a record came from. On a topic in the
default ``avro`` format the schema comes from the record's
``streamflow-schema`` header, or else from the fingerprint in its
single-object header, so a dead letter of garbage is reported as undecodable
rather than hidden or mis-read. Records in the other formats carry neither
(another client wrote them, with a registry id or as plain JSON), so a
decoder that knows the application reads a topic of another format with the
codec its ports use (:class:`~streamflow.runtime.codecs.Codecs`, the one
place that picks it), and a dead letter with the codec of the topic it came
from, since its value is the original bytes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import Consumer, Message, TopicPartition

from streamflow.api import descriptor as descriptors
from streamflow.blueprint.model import Application, TopicSpec
from streamflow.runtime.clients import watermarks
from streamflow.runtime.codecs import Codecs
from streamflow.schema import DecodeError, SchemaStore, SingleObjectCodec
from streamflow.schema.codecs import MAGIC, Codec
from streamflow.schema.formats import TopicFormat
from streamflow.schema.registry import RegistryError, RegistryUnavailable, schema_id_of

__all__ = [
    "Decoded",
    "Decoder",
    "PeekError",
    "assign_last",
    "drain",
    "header_text",
    "headers",
    "last",
    "topic_schema",
]

SOURCE_TOPIC_HEADER = "streamflow-source-topic"  # a dead letter's (runtime/dlq.py)


class PeekError(Exception):
    """A topic that cannot be read (it does not exist, the broker refused)."""


@dataclass(frozen=True)
class Decoded:
    """A record's value, or why it has none; ``schema_id`` when it is registry-framed."""

    schema: str | None
    value: Any
    error: str | None
    schema_id: int | None = None


class Decoder:
    """Decodes records as their topic's format says; caches one codec a schema or topic.

    ``app``: the application the topics belong to; without it every record is
    read as single-object Avro. ``schemas``: the schema each topic's ports use
    (``{topic: schema}``), where the caller knows it; for the others it is
    found from the ports' declarations, on first need, so a topic in the
    default format never loads a streamlet class.
    """

    def __init__(
        self,
        store: SchemaStore,
        *,
        app: Application | None = None,
        schemas: Mapping[str, str] | None = None,
        codecs: Codecs | None = None,
    ) -> None:
        self.store = store
        self.app = app
        self._schemas = dict(schemas or {})
        self._codecs = codecs or (Codecs(app, store) if app is not None else None)
        self._single: dict[str, SingleObjectCodec] = {}
        self._by_topic: dict[str, tuple[str | None, Codec | str]] = {}  # codec, or why none

    def decode(self, msg: Message) -> Decoded:
        raw = msg.value()
        if raw is None:
            return Decoded(None, None, "no value (a tombstone)")
        topic = self.formatted_topic(msg)
        if topic is not None:
            return self._by_format(topic, raw)
        name = header_text(msg, "streamflow-schema") or self._by_fingerprint(raw)
        if not name or name not in self.store:
            return Decoded(name or None, None, "no known schema")
        codec = self._single.get(name) or SingleObjectCodec(self.store.get(name), store=self.store)
        self._single[name] = codec
        try:
            return Decoded(name, codec.decode(raw), None)
        except DecodeError as exc:
            return Decoded(name, None, str(exc))

    def problem(self, topic: str) -> str | None:
        """Why no record of ``topic`` (an application topic) can be decoded at all, if so."""
        spec = self.app.topics.get(topic) if self.app is not None else None
        if spec is None or spec.format is TopicFormat.AVRO:
            return None
        _, codec = self._codec(spec)
        return codec if isinstance(codec, str) else None

    def formatted_topic(self, msg: Message) -> TopicSpec | None:
        """The application topic whose format (not ``avro``) ``msg`` is in, if any.

        A dead letter's value is the record as consumed, so it is in the format
        of the topic it came from, which its headers name.
        """
        if self.app is None:
            return None
        spec = self.app.topics.get(str(msg.topic()))
        if spec is None:
            spec = self.app.topics.get(header_text(msg, SOURCE_TOPIC_HEADER))
        return spec if spec is not None and spec.format is not TopicFormat.AVRO else None

    def _by_format(self, topic: TopicSpec, raw: bytes) -> Decoded:
        schema_id = schema_id_of(raw) if topic.format.uses_registry else None
        name, codec = self._codec(topic)
        if isinstance(codec, str):
            return Decoded(name, None, codec, schema_id)
        try:
            return Decoded(name, codec.decode(raw), None, schema_id)
        except (DecodeError, RegistryError, RegistryUnavailable) as exc:
            # an unreachable registry is not cached: the next record asks again
            return Decoded(name, None, str(exc), schema_id)

    def _codec(self, topic: TopicSpec) -> tuple[str | None, Codec | str]:
        found = self._by_topic.get(topic.name)
        if found is None:
            found = self._by_topic[topic.name] = self._make_codec(topic)
        return found

    def _make_codec(self, topic: TopicSpec) -> tuple[str | None, Codec | str]:
        assert self.app is not None and self._codecs is not None
        name = self._schemas.get(topic.name)
        if name is None:
            try:
                name = topic_schema(self.app, topic)
            except (descriptors.ClassLoadError, descriptors.DeclarationError, ImportError) as exc:
                return None, f"cannot tell the schema of {topic.name}'s ports: {exc}"
        if name is None:
            return None, f"no port of the application reads or writes {topic.name}"
        if name not in self.store:
            return name, f"schema {name} is not among the application's schemas"
        try:
            return name, self._codecs.for_topic(topic, name, producing=False)
        except RuntimeError as exc:  # no registry configured, or its client not installed
            return name, str(exc)

    def _by_fingerprint(self, raw: bytes) -> str:
        if len(raw) >= 10 and raw[:2] == MAGIC:
            schema = self.store.by_fingerprint(int.from_bytes(raw[2:10], "little"))
            return schema.name if schema else ""
        return ""


def topic_schema(app: Application, topic: TopicSpec) -> str | None:
    """The schema ``topic`` is written with: its producers' outlet schema, else what reads it.

    A producer's schema is the writer's, so a record reads as it was written;
    a topic written from outside has only its consumers' inlet schema to go by.
    """
    for ref in (*topic.producers, *topic.consumers):
        port = app.descriptor(ref.streamlet).port(ref.port)
        if port is not None:
            return port.schema
    return None


def assign_last(consumer: Consumer, topic: str, n: int, *, timeout: float = 10) -> None:
    """Assign every partition of ``topic``, each at its end minus ``n``."""
    meta = consumer.list_topics(topic, timeout=timeout).topics[topic]
    if meta.error is not None:
        raise PeekError(f"topic {topic!r}: {meta.error.str()}")
    partitions = []
    for p in meta.partitions:
        low, high = watermarks(consumer, TopicPartition(topic, p), timeout_s=timeout)
        partitions.append(TopicPartition(topic, p, max(low, high - n)))
    consumer.assign(partitions)


def drain(consumer: Consumer, *, timeout: float = 30) -> list[Message]:
    """What the assignment holds, up to the ends seen now; later records are not waited for."""
    ends = {}
    for tp in consumer.assignment():
        _, high = watermarks(consumer, tp)
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
