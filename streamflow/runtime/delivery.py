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
consumer offsets (``send_offsets_to_transaction``). Consumers downstream read
``read_committed``, so they see a batch's outputs only if its offsets moved.
Under load, full batches share one transaction for up to ``commit_interval_s``
(the processor decides, see ``Processor._holds``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

__all__ = [
    "IDLE_FLUSH_S",
    "AtLeastOnce",
    "CallWatchdog",
    "Delivery",
    "DeliveryError",
    "ExactlyOnce",
    "FailedOutputs",
    "Headers",
    "Offsets",
    "TransactionAborted",
]

log = logging.getLogger("streamflow.runtime")

Offsets = dict[tuple[str, int], int]

# How long the loop, finding no input, waits for the producer to send what it holds.
IDLE_FLUSH_S = 0.001
Headers = list[tuple[str, str | bytes | None]]


class DeliveryError(Exception):
    """An output could not be delivered; the replica must restart from committed offsets."""


def _reason(exc: KafkaException) -> str:
    """What librdkafka says went wrong, in words."""
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def _produce(
    producer: Producer, topic: str, value: bytes | None, key: bytes | None, **where: Any
) -> None:
    """Produce (``where``: its ``headers``, or a ``partition``), waiting for queue space
    instead of failing or growing memory."""
    while True:
        try:
            producer.produce(topic, value, key, **where)
            return
        except BufferError:
            producer.poll(0.05)


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


class Delivery:
    """The interface the processing loop uses; one implementation per guarantee."""

    # The shortest time between the starts of two batches that are not full: how long
    # a batch may wait for more records when the previous one began that recently.
    batch_interval_s = 0.0
    # How long full batches may share one transaction (0: each batch is its own, or
    # there are no transactions). See ``Processor._holds``.
    commit_interval_s = 0.0
    # Whether a batch is a transaction: its outputs are shown only once it commits, and
    # an aborted one raises TransactionAborted from end_batch for its writer to redo.
    transactional = False

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    def begin_batch(self) -> None: ...

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Headers) -> None:
        """Neither guarantee needs anything per record (failures are reported apart)."""
        try:  # the common case, without a wrapper call per record
            self.producer.produce(topic, value, key, headers=headers)
        except BufferError:
            _produce(self.producer, topic, value, key, headers=headers)

    def end_batch(self, offsets: Offsets) -> None: ...

    def produce_to(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        """A record for one given partition (a state changelog's), in the batch as outputs are."""
        _produce(self.producer, topic, value, key, partition=partition)

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

    def close(self, timeout: float = 30.0) -> None:
        remaining = self.producer.flush(timeout)
        if remaining:
            log.error("%d outputs were not acknowledged before shutdown", remaining)


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
    ) -> None:
        super().__init__(producer)
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
            if self.producer.flush(self.store_interval_s):
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
        self.producer.flush()
        self._store_finished()  # still ours: stored before they are forgotten below
        if self._assigned is not None:
            self._assigned.difference_update((tp.topic, tp.partition) for tp in partitions)
        if self.consumer is None:
            return
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                log.warning("commit on revoke failed: %s", exc.args[0].str())

    def close(self, timeout: float = 30.0) -> None:
        super().close(timeout)
        self._open = False
        self._store_finished()
        if self.consumer is not None:
            try:
                self.consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    log.warning("final commit failed: %s", exc.args[0].str())


class TransactionAborted(Exception):
    """The batch's transaction was aborted and the batch must be processed again.

    A rebalance while the transaction was open (``ILLEGAL_GENERATION``), a broker
    restart, a request that timed out: none of this is fatal to an exactly-once
    replica. Nothing of the batch became visible to ``read_committed`` readers and
    its offsets did not move, so the loop rewinds and retries it after
    ``retry_after`` seconds.
    """

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CallWatchdog:
    """Ends the process when a client call outlives its own timeout by ``grace_s``.

    librdkafka bounds its transactional calls with the timeout it is given, but a
    broker restart has left ``send_offsets_to_transaction`` blocked for minutes past
    it (librdkafka 2.16). A replica stuck in C cannot be unstuck from Python, so a
    thread watches the call in progress and, past the deadline, logs what was stuck
    and exits with ``EXIT_STUCK``: the supervisor or Kubernetes starts a fresh one,
    which resumes from the committed offsets.

    The grace is what bounds exactly-once recovery after a broker or network fault:
    a stuck replica ends within the call's timeout (``transaction.timeout.ms``, 10 s)
    plus ``GRACE_S`` plus one poll, and its replacement starts after the supervisor's
    backoff (1 s). When librdkafka works it ends its calls within milliseconds of
    their timeout, so 5 s waits only for a call that is truly stuck (15 s before).
    """

    EXIT_STUCK = 70
    GRACE_S = 5.0
    POLL_S = 1.0

    def __init__(
        self,
        *,
        grace_s: float = GRACE_S,
        clock: Callable[[], float] = time.monotonic,
        exit: Callable[[int], Any] = os._exit,
        poll_s: float = POLL_S,
    ) -> None:
        self.grace_s = grace_s
        self._clock, self._exit, self._poll_s = clock, exit, poll_s
        self._call: tuple[str, float, float] | None = None  # (what, started, deadline)
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def bounded(self, what: str, timeout_s: float) -> Iterator[None]:
        """Watch one call that librdkafka should end within ``timeout_s``."""
        if self._thread is None and self._exit is os._exit:
            self._thread = threading.Thread(target=self._watch, name="call-watchdog", daemon=True)
            self._thread.start()
        now = self._clock()
        self._call = (what, now, now + timeout_s + self.grace_s)
        try:
            yield
        finally:
            self._call = None

    def check(self) -> None:
        """Exit if the call in progress is past its deadline (the thread calls this)."""
        call = self._call
        if call is not None and self._clock() > call[2]:
            what, started, _ = call
            log.critical(
                "%s has not returned after %.0fs, past its own timeout: the Kafka client "
                "is stuck; exiting so that a fresh replica resumes from the committed offsets",
                what,
                self._clock() - started,
            )
            logging.shutdown()
            self._exit(self.EXIT_STUCK)

    def _watch(self) -> None:
        while True:
            time.sleep(self._poll_s)
            self.check()


class ExactlyOnce(Delivery):
    """Transactions: ``begin_batch`` opens one, ``end_batch`` commits it with its offsets.

    A transaction costs the same few broker round trips whatever its size, so at a
    moderate rate batches are spaced ``batch_interval_s`` apart rather than taken
    one record at a time; a record that arrives after a pause goes out at once.
    Under load the processor lets full batches share one transaction for up to
    ``commit_interval_s``: it calls ``end_batch`` once, with the offsets of all.

    When a transaction fails, librdkafka says how bad it is. A *fatal* error (this
    producer was fenced by a newer one with its transactional id) ends the replica
    with :class:`DeliveryError`. Anything else is aborted and raised as
    :class:`TransactionAborted`, so the batch is retried; after
    ``max_aborts`` aborts in a row with nothing committed in between, or at once when
    the abort itself fails, the replica gives up (``DeliveryError``) and is restarted.
    Every transactional call is watched by a :class:`CallWatchdog`.
    """

    batch_interval_s = 0.05
    # Under load a transaction spans the full batches of up to this long: its commit
    # costs a few round trips whatever it holds (Kafka Streams commits every 100 ms too).
    commit_interval_s = 0.1
    transactional = True
    max_aborts = 8
    # No longer than the transaction's own timeout (``transaction.timeout.ms``, 10 s
    # unless the app sets it): past that the coordinator aborts the transaction, so
    # waiting longer gains nothing. It is also how soon the watchdog (plus its grace)
    # ends a replica stuck in the call: after a broker restart, a connection reset or
    # a partition, librdkafka 2.16 can leave it blocked for good, its timeout never
    # enforced (confluentinc/librdkafka#5456; the chaos suite hits it every time).
    send_offsets_timeout_s = 10.0

    def __init__(
        self,
        producer: Producer,
        consumer: Consumer | None,
        *,
        watchdog: CallWatchdog | None = None,
        on_committed: Callable[[Offsets], None] | None = None,
        transaction_timeout_s: float | None = None,
    ) -> None:
        """``on_committed`` hears the offsets of each committed transaction (for the lag);
        ``transaction_timeout_s`` is the producer's ``transaction.timeout.ms`` when the app
        sets one, and bounds ``send_offsets_to_transaction`` instead of the default."""
        super().__init__(producer)
        if transaction_timeout_s is not None:
            self.send_offsets_timeout_s = transaction_timeout_s
        self.consumer = consumer
        self.watchdog = watchdog or CallWatchdog()
        self.on_committed = on_committed
        self._open = False
        self._aborts = 0  # transactions aborted in a row
        with self.watchdog.bounded("init_transactions", 60):
            producer.init_transactions(60)

    def begin_batch(self) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            self._failed(exc, "begin_transaction")
        self._open = True

    def end_batch(self, offsets: Offsets) -> None:
        call = "send_offsets_to_transaction"
        try:
            if offsets and self.consumer is not None:
                positions = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
                metadata = self.consumer.consumer_group_metadata()
                timeout = self.send_offsets_timeout_s
                self._retrying(
                    call,
                    timeout,
                    lambda: self.producer.send_offsets_to_transaction(positions, metadata, timeout),
                )
            call = "commit_transaction"
            self._retrying(call, 60, lambda: self.producer.commit_transaction(60))
        except KafkaException as exc:
            self._failed(exc, call)
        finally:
            self._open = False
        self._aborts = 0
        if offsets and self.on_committed is not None:
            self.on_committed(offsets)

    def _retrying(self, call: str, timeout_s: float, attempt: Callable[[], None]) -> None:
        """Call again what timed out: librdkafka wants a retriable transactional call
        repeated (another call in between fails with a conflict), up to three times."""
        for tries in range(3):
            try:
                with self.watchdog.bounded(call, timeout_s):
                    attempt()
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if (
                    tries == 2
                    or not isinstance(error, KafkaError)
                    or not error.retriable()
                    or error.txn_requires_abort()
                    or error.fatal()
                ):
                    raise
                log.warning("%s: %s; calling it again", call, error.str())

    def produce_unbatched(
        self, topic: str, value: bytes, key: bytes | None, headers: Headers
    ) -> None:
        """Its own transaction, retried after an abort: no loop is there to rewind it."""
        while True:
            try:
                super().produce_unbatched(topic, value, key, headers)
                return
            except TransactionAborted as aborted:  # DeliveryError after max_aborts
                log.warning("%s", aborted)
                time.sleep(aborted.retry_after)

    def _failed(self, exc: KafkaException, call: str) -> None:
        error = exc.args[0] if exc.args else None
        reason = _reason(exc)
        fatal = isinstance(error, KafkaError) and error.fatal()
        unaborted = self.abort()
        if fatal:
            raise DeliveryError(f"transaction failed in {call}: {reason}") from None
        if unaborted is not None:
            # librdkafka wants a failed abort called again before anything else, and after
            # a broker restart it can keep timing out (its coordinator connection stuck):
            # each retry, each begin_transaction ("conflicting abort_transaction call in
            # progress") fails, for as many aborts as max_aborts allows, minutes. A fresh
            # producer fences this one, and its transaction with it, within seconds.
            raise DeliveryError(
                f"transaction failed in {call}: {reason}; its abort failed too "
                f"({unaborted}), so this producer cannot go on: the replica ends and "
                "resumes from the committed offsets"
            ) from None
        self._aborts += 1
        if self._aborts > self.max_aborts:
            raise DeliveryError(
                f"{self._aborts} transactions aborted in a row, the last in {call}: {reason}"
            ) from None
        raise TransactionAborted(
            f"transaction aborted in {call}, the batch will be retried: {reason}",
            retry_after=min(0.1 * 2 ** (self._aborts - 1), 5.0),
        ) from None

    def abort(self) -> str | None:
        """Abort the open transaction; why the abort failed, or None when it did not."""
        try:
            with self.watchdog.bounded("abort_transaction", 30):
                self.producer.abort_transaction(30)
        except KafkaException as exc:
            reason = _reason(exc)
            log.warning("abort failed: %s", reason)
            return reason
        finally:
            self._open = False
        return None

    def close(self, timeout: float = 30.0) -> None:
        if self._open:
            self.abort()
        super().close(timeout)
