"""Control inlets: broadcast, replayed from the start, applied between batches.

Every replica must converge on the same control state (the current model),
so a control inlet has no consumer group: its consumer is *assigned* every
partition of the topic and starts at the beginning. At start-up the replica
replays the topic up to the end offsets it saw when it started, and only then
takes data; afterwards it polls the control consumer between data batches,
never inside one, so a batch is always processed under one state.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from streamflow.api.streamlet import Record
from streamflow.runtime.clients import KafkaClients, watermarks
from streamflow.schema.codecs import Codec, DecodeError
from streamflow.schema.registry import RegistryRefused, RegistryUnavailable

__all__ = ["ControlInletBinding", "ControlReader"]

log = logging.getLogger("streamflow.runtime.control")
_REGISTRY_RETRY_S = 2.0


class _RegistryDown(Exception):
    """A control record's schema could not be looked up: read it again later."""


@dataclass(frozen=True)
class ControlInletBinding:
    inlet: str
    topic: str
    codec: Codec


Apply = Callable[[Record], None]
Reject = Callable[[Message, str, Exception], None]


class ControlReader:
    """Reads a replica's control inlets through ``consumer``, which it owns and closes."""

    @classmethod
    def connect(
        cls, *, clients: KafkaClients, bindings: list[ControlInletBinding], client_id: str
    ) -> ControlReader:
        """A reader with a consumer of its own: no group offsets, every partition assigned."""
        consumer = clients.consumer(
            group=f"{client_id}.control.{uuid.uuid4().hex[:8]}",
            client_id=f"{client_id}.control",
            **{"enable.auto.commit": False, "auto.offset.reset": "earliest"},
        )
        return cls(consumer=consumer, bindings=bindings)

    def __init__(self, *, consumer: Consumer, bindings: list[ControlInletBinding]) -> None:
        self._bindings = {b.topic: b for b in bindings}
        self._consumer = consumer
        self._partitions: list[TopicPartition] = []
        self._retry_at = 0.0

    def assign(self, timeout: float = 30.0) -> None:
        for topic in self._bindings:
            meta = self._consumer.list_topics(topic, timeout=timeout).topics[topic]
            if meta.error is not None:
                raise RuntimeError(f"control topic {topic!r}: {meta.error.str()}")
            self._partitions += [
                TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions
            ]
        self._consumer.assign(self._partitions)

    def catch_up(self, *, apply: Apply, reject: Reject, timeout: float = 120.0) -> int:
        """Replay every control record written before now; returns how many were applied."""
        ends = {}
        for tp in self._partitions:
            low, high = watermarks(self._consumer, tp)
            if high > low:
                ends[(tp.topic, tp.partition)] = high
        applied = 0
        deadline = time.monotonic() + timeout
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"control inlets did not catch up in {timeout:.0f}s: {ends}")
            messages = self._consumer.consume(500, 0.2)
            for i, msg in enumerate(messages):
                try:
                    applied += self._handle(msg, apply, reject)
                except _RegistryDown as exc:
                    self._rewind(messages[i:], exc)
                    time.sleep(_REGISTRY_RETRY_S)  # replaying is all this replica does yet
                    break
                key = (cast(str, msg.topic()), cast(int, msg.partition()))
                if key in ends and cast(int, msg.offset()) + 1 >= ends[key]:
                    del ends[key]
        log.info("control inlets caught up", extra={"control_records": applied})
        return applied

    def poll(self, *, apply: Apply, reject: Reject, timeout: float = 0.0) -> int:
        if time.monotonic() < self._retry_at:
            return 0  # the registry was down: data batches go on, control is asked later
        applied = 0
        messages = self._consumer.consume(100, timeout)
        for i, msg in enumerate(messages):
            try:
                applied += self._handle(msg, apply, reject)
            except _RegistryDown as exc:
                self._rewind(messages[i:], exc)
                self._retry_at = time.monotonic() + _REGISTRY_RETRY_S
                break
        return applied

    def _rewind(self, unhandled: list[Message], exc: Exception) -> None:
        """Seek back to the first record not handled in each partition: it is read again."""
        first: dict[tuple[str, int], int] = {}
        for msg in unhandled:
            if msg.error() is None:
                key = (cast(str, msg.topic()), cast(int, msg.partition()))
                first.setdefault(key, cast(int, msg.offset()))
        for (topic, partition), offset in first.items():
            self._consumer.seek(TopicPartition(topic, partition, offset))
        log.warning(
            "control inlet waits for the schema registry (retried in %.0fs): %s",
            _REGISTRY_RETRY_S,
            exc,
        )

    def _handle(self, msg: Message, apply: Apply, reject: Reject) -> int:
        error = msg.error()
        if error is not None:
            log.warning("control consumer error: %s", error.str())
            return 0
        raw = msg.value()
        if raw is None:  # a tombstone: compaction deletes the key; nothing to apply
            return 0
        binding = self._bindings[cast(str, msg.topic())]
        try:
            value = binding.codec.decode(raw)
        except DecodeError as exc:
            reject(msg, binding.inlet, exc)
            return 0
        except (RegistryUnavailable, RegistryRefused) as exc:
            # the record is fine and must not be rejected: it is read again later
            raise _RegistryDown(str(exc)) from None
        key = msg.key()
        record = Record(
            value=value,
            key=key.decode("utf-8", "replace") if key is not None else None,
            inlet=binding.inlet,
            topic=binding.topic,
            partition=cast(int, msg.partition()),
            offset=cast(int, msg.offset()),
            timestamp_ms=msg.timestamp()[1],
            headers=dict(msg.headers() or ()),  # type: ignore[arg-type]
        )
        try:
            apply(record)
        except Exception as exc:
            reject(msg, binding.inlet, exc)
            return 0
        return 1

    def close(self) -> None:
        self._consumer.close()
