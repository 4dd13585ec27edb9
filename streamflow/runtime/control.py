"""Control inlets: broadcast, replayed from the start, applied between batches.

Every replica must converge on the same control state (the current model),
so a control inlet has no consumer group: its consumer is *assigned* every
partition of the topic and starts at the beginning. At start-up the replica
replays the topic up to the end offsets it saw when it started, and only then
takes data; afterwards it polls the control consumer between data batches,
never inside one, so a batch is always processed under one state.

A consumer that is assigned its partitions can stop fetching after a broker restart
and never start again by itself (confluentinc/librdkafka#5153): the replica would
serve the old model for good, though a new descriptor is committed. So the reader
notes where it stands in each partition (past the last record, or at the end it was
told of); when it has not moved for ``STALLED_AFTER_S`` it asks Kafka where each
partition's committed records end, and if that is past where it stands, it closes its
consumer and makes a new one there. Nothing is applied twice, and a transaction left
open is not taken for a stall: a ``read_committed`` end stops before it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from streamflow.api.streamlet import Record
from streamflow.runtime.clients import KafkaClients, watermarks
from streamflow.schema.codecs import Codec, DecodeError
from streamflow.schema.registry import RegistryRefused, RegistryUnavailable

__all__ = ["ControlInletBinding", "ControlReader"]

log = logging.getLogger("streamflow.runtime.control")
_REGISTRY_RETRY_S = 2.0
#: How long the reader may stand still before it asks whether records wait past it.
STALLED_AFTER_S = 30.0
_ASK_END_S = 2.0  # how long one ask for a partition's end may take, in the data loop
_Where = tuple[str, int]


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

        def make_consumer() -> Consumer:
            return clients.consumer(
                group=f"{client_id}.control.{uuid.uuid4().hex[:8]}",
                client_id=f"{client_id}.control",
                **{
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    # where the reader stands when a partition's last records were not
                    # data (a transaction's marker), so that it is not taken for behind
                    "enable.partition.eof": True,
                },
            )

        return cls(consumer=make_consumer(), bindings=bindings, make_consumer=make_consumer)

    def __init__(
        self,
        *,
        consumer: Consumer,
        bindings: list[ControlInletBinding],
        make_consumer: Callable[[], Consumer] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``make_consumer`` makes a consumer like ``consumer`` when that one is stuck;
        without it a stuck consumer is only logged."""
        self._bindings = {b.topic: b for b in bindings}
        self._consumer = consumer
        self._make_consumer = make_consumer
        self._clock = clock
        self._partitions: list[TopicPartition] = []
        self._retry_at = 0.0
        #: the offset the reader reads next in each partition, once known
        self._position: dict[_Where, int] = {}
        self._moved_at = clock()
        #: where the reader stood each time its consumer was made again
        self.remade: list[dict[_Where, int]] = []
        self.stalled_after_s = STALLED_AFTER_S

    def assign(self, timeout: float = 30.0) -> None:
        for topic in self._bindings:
            meta = self._consumer.list_topics(topic, timeout=timeout).topics[topic]
            if meta.error is not None:
                raise RuntimeError(f"control topic {topic!r}: {meta.error.str()}")
            self._partitions += [
                TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions
            ]
        self._consumer.assign(self._partitions)
        self._moved_at = self._clock()

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
                if key in ends and self._position.get(key, 0) >= ends[key]:
                    del ends[key]
        log.info("control inlets caught up", extra={"control_records": applied})
        return applied

    def poll(self, *, apply: Apply, reject: Reject, timeout: float = 0.0) -> int:
        if self._clock() < self._retry_at:
            return 0  # the registry was down: data batches go on, control is asked later
        applied = 0
        messages = self._consumer.consume(100, timeout)
        for i, msg in enumerate(messages):
            try:
                applied += self._handle(msg, apply, reject)
            except _RegistryDown as exc:
                self._rewind(messages[i:], exc)
                self._retry_at = self._clock() + _REGISTRY_RETRY_S
                break
        if not messages and self._clock() - self._moved_at >= self.stalled_after_s:
            self._moved_at = self._clock()  # asked at most once a stalled_after_s
            self._unstick()
        return applied

    def _unstick(self) -> None:
        """Make the consumer again where the reader stands, if committed control records
        wait past it: the consumer has stopped fetching."""
        behind: dict[_Where, tuple[int, int]] = {}
        for tp in self._partitions:
            where = (tp.topic, tp.partition)
            try:
                # the consumer reads read_committed, so this end is the last stable offset
                low, end = watermarks(self._consumer, tp, timeout_s=_ASK_END_S)
            except KafkaException as exc:
                log.info("control inlet: where %s[%d] ends is unknown: %s", *where, exc)
                return  # a broker is away: nothing can be fetched, so nothing is stuck
            stands = self._position.get(where, low)
            if end > stands:
                behind[where] = (stands, end)
        if not behind:
            return
        if self.remade and self.remade[-1] == self._position:
            # made again here already, and it read nothing since: what waits cannot be
            # fetched (a compacted gap at the end, say), and a new consumer will not help
            return
        waiting = ", ".join(f"{t}[{p}] at {s} of {e}" for (t, p), (s, e) in behind.items())
        if self._make_consumer is None:
            log.warning("control inlet read nothing for %.0fs: %s", self.stalled_after_s, waiting)
            return
        log.warning(
            "control inlet read nothing for %.0fs although committed records wait (%s): "
            "its consumer stopped fetching (confluentinc/librdkafka#5153), so it is "
            "made again where it stood",
            self.stalled_after_s,
            waiting,
        )
        self.remade.append(dict(self._position))
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.info("closing the stuck control consumer: %s", exc)
        self._consumer = self._make_consumer()
        position = self._position
        self._consumer.assign(
            [
                TopicPartition(t, p, position.get((t, p), OFFSET_BEGINNING))
                for t, p in ((tp.topic, tp.partition) for tp in self._partitions)
            ]
        )

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
        where = (cast(str, msg.topic()), cast(int, msg.partition()))
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._moved(where, cast(int, msg.offset()))  # the end, past any marker
            else:
                log.warning("control consumer error: %s", error.str())
            return 0
        applied = self._apply(msg, apply, reject)  # _RegistryDown: read again, not passed
        self._moved(where, cast(int, msg.offset()) + 1)
        return applied

    def _moved(self, where: _Where, position: int) -> None:
        if self._position.get(where) != position:
            self._position[where] = position
            self._moved_at = self._clock()

    def _apply(self, msg: Message, apply: Apply, reject: Reject) -> int:
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
