"""Delivery guarantees: when an input counts as done.

*At-least-once* (the default) never blocks on the broker for a batch. Its
producer reports only failed deliveries (``delivery.report.only.error``):
a report per record would cost a Python call and a copy of each output's
value, which at 1 KB records was most of what set the runtime apart from a
hand-written loop. Consumed offsets wait, batch by batch, until everything
produced before them is acknowledged: whenever the producer's queue is empty,
every finished batch is stored at once, and librdkafka commits what is
stored. Under load the queue is never empty, so at most every
``store_interval_s`` (the commit interval) the producer is flushed first.
A failed delivery stops all storing for good, so a crash or restart replays
from the last batch that was wholly delivered and nothing is lost. On a
partition revoke the producer is flushed first, so the new owner starts
after our last output.

*Exactly-once* wraps each batch in a Kafka transaction together with the
consumer offsets: :mod:`streamflow.runtime.transactions`.

Once the replica is asked to stop, no wait on Kafka outlasts its stop deadline
(:mod:`streamflow.runtime.shutdown`): what Kafka has not acknowledged by then is
given up and counted (:meth:`Delivery.close` says how much), and offsets are
committed without waiting for a coordinator that may be gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streamflow.runtime import shutdown
from streamflow.runtime.watchdog import CallWatchdog  # re-exported: the guarantees use it

__all__ = [
    "IDLE_FLUSH_S",
    "AtLeastOnce",
    "CallWatchdog",
    "CountedOutputs",
    "Delivery",
    "DeliveryError",
    "FailedOutputs",
    "Headers",
    "Offsets",
    "error_reason",
]

log = logging.getLogger("streamflow.runtime")

Offsets = dict[tuple[str, int], int]

# How long the loop, finding no input, waits for the producer to send what it holds.
IDLE_FLUSH_S = 0.001
Headers = list[tuple[str, str | bytes | None]]


class DeliveryError(Exception):
    """An output could not be delivered; the replica must restart from committed offsets."""


def error_reason(exc: KafkaException) -> str:
    """What librdkafka says went wrong, in words."""
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


class FailedOutputs:
    """An at-least-once producer's ``on_delivery``: librdkafka reports only failures."""

    def __init__(self) -> None:
        self.first: str | None = None
        self.count = 0

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.count += 1
            if self.first is None:
                self.first = err.str()

    def producer_config(self) -> dict[str, Any]:
        """What the producer must be created with for :class:`AtLeastOnce`."""
        return {"delivery.report.only.error": True, "on_delivery": self}


class CountedOutputs(FailedOutputs):
    """A source's ``on_delivery``: librdkafka reports every record, and the ones Kafka
    acknowledged are counted (``delivered``), failures kept as :class:`FailedOutputs` does.

    What a source says it delivered must be what Kafka has, not what it handed to the
    producer: a report per record costs a call, which a source (that encodes every
    record in Python anyway) can afford and a processor's hot path cannot.
    """

    def __init__(self) -> None:
        super().__init__()
        self.delivered = 0

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            super().__call__(err, msg)

    def producer_config(self) -> dict[str, Any]:
        return {"delivery.report.only.error": False, "on_delivery": self}


class Delivery:
    """The interface the processing loop uses; one implementation per guarantee."""

    # Until when (``time.monotonic``) a batch that is not full waits for more records
    # before it begins: 0, it never waits. Exactly-once moves it after each commit.
    not_before = 0.0
    # How long full batches may share one transaction (0: each batch is its own, or
    # there are no transactions). See ``Checkpoint.holds``.
    commit_interval_s = 0.0
    # Whether a batch is a transaction: its outputs are shown only once it commits, and
    # an aborted one raises ``transactions.TransactionAborted`` from end_batch for its
    # writer to redo.
    transactional = False

    def __init__(self, producer: Producer, *, stopping: shutdown.Stopping | None = None) -> None:
        """``stopping``: the replica's stop request, whose deadline bounds every wait on
        Kafka once it is made (none: a stop that is never requested)."""
        self.producer = producer
        self.stopping = stopping if stopping is not None else shutdown.Stopping()
        #: What the last line of a stopped replica adds (a transaction aborted at the stop).
        self.stop_notes: list[str] = []

    def begin_batch(self) -> None: ...

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Headers) -> None:
        """Neither guarantee needs anything per record (failures are reported apart)."""
        try:  # the common case, without a wrapper call per record
            self.producer.produce(topic, value, key, headers=headers)
        except BufferError:
            self._produce_when_room(topic, value, key, headers=headers)

    def end_batch(self, offsets: Offsets) -> None: ...

    def produce_to(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        """A record for one given partition (a state changelog's), in the batch as outputs are."""
        self._produce_when_room(topic, value, key, partition=partition)

    def _produce_when_room(
        self, topic: str, value: bytes | None, key: bytes | None, **where: Any
    ) -> None:
        """Produce (``where``: its ``headers``, or a ``partition``), waiting for queue space
        instead of failing or growing memory; when stopping, only until the deadline."""
        while True:
            try:
                self.producer.produce(topic, value, key, **where)
                return
            except BufferError:
                if self.stopping.overdue:
                    raise shutdown.Overdue(
                        "the producer's queue was still full at the stop deadline"
                    ) from None
                self.producer.poll(0.05)

    def direct_produce(self) -> Callable[..., None]:
        """The producer's own ``produce(topic, value, key, headers=...)``, for the hot path
        to call without a wrapper; on ``BufferError`` (a full queue) the caller falls back
        to :meth:`produce`, which waits for room."""
        return self.producer.produce

    def produce_unbatched(
        self, topic: str, value: bytes, key: bytes | None, headers: Headers
    ) -> None:
        """An output that belongs to no input batch (control outputs, ingress)."""
        self.begin_batch()
        self.produce(topic, value, key, headers)
        self.end_batch({})

    def poll(self) -> None:
        self.producer.poll(0)

    def idle(self) -> None:
        """The loop found no input waiting: send what the producer holds now.

        ``linger.ms`` (5 ms) lets the producer gather records into fewer requests, which
        under load is what keeps the broker's share of the CPU down; but when no more
        input is queued, waiting out the linger only adds to every record's latency.
        librdkafka sends at once only while a flush is in progress (waking its broker
        threads is not enough), so this is a flush of at most ``IDLE_FLUSH_S``.
        """
        if len(self.producer):
            self.producer.flush(IDLE_FLUSH_S)

    def on_assign(self, partitions: list[TopicPartition]) -> None: ...

    def on_revoke(self, partitions: list[TopicPartition]) -> None: ...

    def acknowledged(self) -> int | None:
        """Records Kafka has acknowledged, where this delivery hears of each; else None."""
        return None

    def close(self, timeout: float = 30.0) -> int:
        """Flush what the producer holds, for up to ``timeout`` and no later than the stop
        deadline; the records Kafka has not acknowledged (for the caller to tell)."""
        return self.stopping.flush(self.producer, timeout)


class AtLeastOnce(Delivery):
    """Offsets stored once everything produced before them is acknowledged.

    ``producer`` must be created with ``failures.producer_config()``: it reports
    failed deliveries to ``failures`` and nothing else.
    """

    def __init__(
        self,
        producer: Producer,
        consumer: Consumer | None,
        failures: FailedOutputs,
        *,
        store_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        stopping: shutdown.Stopping | None = None,
    ) -> None:
        super().__init__(producer, stopping=stopping)
        self.consumer = consumer
        self.failures = failures
        self.store_interval_s = store_interval_s
        self._clock = clock
        self._finished: Offsets = {}  # batches done, waiting for their outputs' acknowledgement
        self._open = False
        self._stored_at = clock()
        self._lost: str | None = None  # the first lost output: nothing is stored after it
        # The partitions we own, kept from the rebalance callbacks. Asking the consumer
        # (``assignment()``) is a round trip to librdkafka's main thread, and cost 7% of
        # the loop at 100 B records when it ran once a batch. None: no callback yet.
        self._assigned: set[tuple[str, int]] | None = None

    def begin_batch(self) -> None:
        self._open = True

    def end_batch(self, offsets: Offsets) -> None:
        self._open = False
        if offsets:
            self._finished.update(offsets)  # batches come in order: later offsets win
        self._store_finished()

    def poll(self) -> None:
        self.producer.poll(0)
        self._store_finished()

    def idle(self) -> None:
        super().idle()
        self._store_finished()  # the queue may have drained: store what it held back

    def acknowledged(self) -> int | None:
        return self.failures.delivered if isinstance(self.failures, CountedOutputs) else None

    @property
    def waiting(self) -> Offsets:
        """Offsets of finished batches whose outputs are not all acknowledged yet."""
        return dict(self._finished)

    def _store_finished(self) -> None:
        if self._lost is not None:  # not even at shutdown: the restart must redo the lost batch
            return
        if self.failures.first is not None:
            # never store past a lost output: the replica restarts from the last good batch
            self._lost = self.failures.first
            raise DeliveryError(f"an output could not be delivered: {self._lost}")
        if not self._finished or self._open:
            return
        if len(self.producer):
            if self._clock() - self._stored_at < self.store_interval_s:
                return
            # under load the queue never drains by itself: wait for what is in flight
            if self.producer.flush(self.stopping.cap(self.store_interval_s)):
                return  # the broker is slow or away: stored on a later turn
            self._store_finished()
            return
        done, self._finished = self._finished, {}
        self._stored_at = self._clock()
        if self.consumer is not None:
            self._store(done)

    def _store(self, offsets: Offsets) -> None:
        assert self.consumer is not None
        assigned = self._assigned
        if assigned is None:
            assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        partitions = [
            TopicPartition(t, p, o) for (t, p), o in offsets.items() if (t, p) in assigned
        ]
        if partitions:
            self.consumer.store_offsets(offsets=partitions)

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        """Incremental (cooperative) or whole (eager): either way these are added."""
        if self._assigned is None:
            self._assigned = set()
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        """Finish everything in flight, then commit, before the partitions move."""
        if self.stopping.requested:  # the consumer's close: no later than the deadline
            self.stopping.flush(self.producer)
        else:
            self.producer.flush()
        self._store_finished()  # still ours: stored before they are forgotten below
        if self._assigned is not None:
            self._assigned.difference_update((tp.topic, tp.partition) for tp in partitions)
        self._commit("commit on revoke")

    def close(self, timeout: float = 30.0) -> int:
        unacknowledged = super().close(timeout)
        self._open = False
        self._store_finished()
        self._commit("final commit")
        return unacknowledged

    def _commit(self, what: str) -> None:
        """Commit the stored offsets: at once, except once stopping. A synchronous commit
        waits for the group's coordinator (10 s when Kafka is gone), and the consumer's
        close, which comes next, commits what is stored anyway."""
        if self.consumer is None:
            return
        try:
            if self.stopping.requested:
                self.consumer.commit(asynchronous=True)
            else:
                self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                log.warning("%s failed: %s", what, exc.args[0].str())
