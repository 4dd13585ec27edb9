"""The in-memory producer: acknowledgements a test controls, transactions when asked."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streamflow.runtime.inmemory.broker import IDLE_POLL_S, Callback, Headers, MemoryBroker

__all__ = ["MemoryProducer"]


@dataclass
class _Sent:
    topic: str
    value: bytes | None
    key: bytes | None
    headers: Headers | None
    callback: Callback | None
    partition: int | None = None


class MemoryProducer:
    """A producer whose acknowledgements a test controls; transactional when asked."""

    def __init__(
        self,
        broker: MemoryBroker,
        *,
        queue_limit: int = 100_000,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """``config`` may hold ``on_delivery`` (for records produced without a callback of
        their own) and ``delivery.report.only.error``, as confluent-kafka's does."""
        self.broker = broker
        self.queue_limit = queue_limit
        config = config or {}
        self._default_callback: Callback | None = config.get("on_delivery")
        self._only_errors = bool(config.get("delivery.report.only.error", False))
        self._in_flight: deque[_Sent] = deque()
        self._held = False
        self._failures: deque[KafkaError] = deque()
        self._transactional = False
        self._txn: list[_Sent] | None = None
        self._txn_offsets: tuple[str, list[TopicPartition]] | None = None
        self._txn_failures: dict[str, KafkaException] = {}
        self._txn_lost: KafkaError | None = None
        self.transactions = {"committed": 0, "aborted": 0}

    # -- the confluent-kafka surface -------------------------------------------

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: Headers | None = None,
        on_delivery: Callback | None = None,
        partition: int = -1,
    ) -> None:
        if len(self._in_flight) >= self.queue_limit:
            raise BufferError("Local: Queue full")
        if self._transactional and self._txn is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        chosen = partition if partition >= 0 else None
        self._in_flight.append(_Sent(topic, value, key, headers, on_delivery, chosen))

    def poll(self, timeout: float = 0) -> int:
        delivered = self._deliver()
        if not delivered and timeout > 0:
            time.sleep(min(timeout, IDLE_POLL_S))  # a poller thread must not spin
        return delivered

    def flush(self, timeout: float = -1) -> int:
        if not self._deliver() and self._in_flight and timeout > 0:
            time.sleep(min(timeout, IDLE_POLL_S))  # held: a flush in slices must not spin
        return len(self._in_flight)

    def __len__(self) -> int:
        return len(self._in_flight)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """The broker always answers: it is in memory."""
        return SimpleNamespace(brokers={1: "memory"}, topics=dict.fromkeys(self.broker.topics))

    def init_transactions(self, timeout: float = -1) -> None:
        self._transactional = True

    def begin_transaction(self) -> None:
        self._fail_if_asked("begin_transaction")
        if self._txn is not None:
            raise KafkaException(KafkaError(KafkaError._STATE, "a transaction is already open"))
        self._txn = []
        self._txn_offsets = None
        self._txn_lost = None

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None:
        self._fail_if_asked("send_offsets_to_transaction")
        self._txn_offsets = (str(group_metadata), list(positions))

    def commit_transaction(self, timeout: float = -1) -> None:
        self._fail_if_asked("commit_transaction")
        if self._txn is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        self._deliver(ignore_hold=True)
        if self._txn_lost is not None:  # librdkafka: an abortable error, the batch is redone
            raise KafkaException(self._txn_lost)
        for sent in self._txn:
            self.broker.append(
                sent.topic, sent.value, sent.key, sent.headers, partition=sent.partition
            )
        if self._txn_offsets is not None:
            group, positions = self._txn_offsets
            committed = self.broker.committed.setdefault(group, {})
            committed.update({(tp.topic, tp.partition): tp.offset for tp in positions})
        self._txn = None
        self.transactions["committed"] += 1

    def abort_transaction(self, timeout: float = -1) -> None:
        self._fail_if_asked("abort_transaction")
        self._in_flight.clear()
        self._txn = None
        self._txn_offsets = None
        self.transactions["aborted"] += 1

    # -- what a test does to it ------------------------------------------------

    def hold(self) -> None:
        """Acknowledge nothing until :meth:`release`: outputs stay in flight."""
        self._held = True

    def release(self) -> None:
        self._held = False

    def fail_next(self, count: int = 1, *, reason: str = "Local: Message timed out") -> None:
        """The next ``count`` deliveries fail with a delivery error."""
        self._failures.extend(KafkaError(KafkaError._MSG_TIMED_OUT, reason) for _ in range(count))

    def fail_call(self, name: str, exc: KafkaException) -> None:
        """The next call of the transactional method ``name`` raises ``exc``."""
        self._txn_failures[name] = exc

    @property
    def open_transaction(self) -> bool:
        return self._txn is not None

    def _fail_if_asked(self, name: str) -> None:
        exc = self._txn_failures.pop(name, None)
        if exc is not None:
            raise exc

    def _deliver(self, *, ignore_hold: bool = False) -> int:
        if self._held and not ignore_hold:
            return 0
        delivered = 0
        while self._in_flight:
            sent = self._in_flight.popleft()
            error = self._failures.popleft() if self._failures else None
            msg: Message | None = None
            if error is not None:
                # as librdkafka's: the record that failed, with the error, at no offset
                msg = Message(
                    topic=sent.topic,
                    partition=-1,
                    offset=-1001,
                    key=sent.key,
                    value=sent.value,
                    headers=list(sent.headers) if sent.headers else None,
                    error=error,
                )
                if self._txn is not None:
                    self._txn_lost = error
            else:
                if self._txn is not None:
                    self._txn.append(sent)
                else:
                    msg = self.broker.append(
                        sent.topic, sent.value, sent.key, sent.headers, partition=sent.partition
                    )
            callback = sent.callback or self._default_callback
            if callback is not None and (error is not None or not self._only_errors):
                callback(error, msg)
            delivered += 1
        return delivered
