"""Exactly-once delivery: a Kafka transaction per batch, with the consumer's offsets.

Consumers downstream read ``read_committed``, so they see a batch's outputs only if
its offsets moved with them. Under load, full batches share one transaction for up
to ``commit_interval_s`` (the checkpoint decides, see ``Checkpoint.holds``). The
interface, and at-least-once, are in :mod:`streamflow.runtime.delivery`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NoReturn

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streamflow.runtime import delivery, shutdown
from streamflow.runtime.delivery import Delivery, DeliveryError, Headers, Offsets
from streamflow.runtime.watchdog import CallWatchdog

__all__ = ["ExactlyOnce", "TransactionAborted"]

log = logging.getLogger("streamflow.runtime")


def _fatal(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.fatal()


def _aborted(unaborted: str | None) -> str:
    """What the last line of a stopped replica says of the transaction it gave up."""
    if unaborted is None:
        return "its open transaction was aborted (Kafka unreachable): none of it shows"
    return (
        f"its open transaction could not be aborted ({unaborted}): none of it shows, and "
        "Kafka aborts it once it is older than transaction.timeout.ms"
    )


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


class ExactlyOnce(Delivery):
    """Transactions: ``begin_batch`` opens one, ``end_batch`` commits it with its offsets.

    A transaction costs the same few broker round trips whatever its size (about 5 ms
    on the devkit broker, ``bench.transactions``). A batch is committed as soon as the
    loop has nothing more queued, so an idle pipeline waits for no one, and the
    batches grow by themselves with the rate: what arrives during one commit is the
    next batch. Under load the processor lets full batches share one transaction for
    up to ``commit_interval_s``: it calls ``end_batch`` once, with the offsets of all.

    The coordinator finishes a committed transaction (writes its markers) after
    ``commit_transaction`` returns, and a transaction of the same producer that adds
    partitions before that is refused (``CONCURRENT_TRANSACTIONS``); librdkafka then
    tries again 20 ms later. Back to back, that met 2-4% of the transactions on the
    devkit broker, and put 20 ms on each of their records. So a replica keeps two
    transactional producers (``spare``, its transactional id with ``.b``) and takes
    turns: a transaction begins on the producer whose last one ended a whole
    transaction ago, and met the refusal in 0.1% (a run of that shape, bench/README.md;
    ``bench.transactions`` measures one producer), with no wait.
    Their offsets commit in the order their transactions do: Kafka keeps, per
    partition, the offset whose commit was appended last. Zombies are fenced by the
    consumer group's generation (KIP-447), whichever producer writes.

    Without a spare (a hand-made delivery, a test), one wait is kept instead, tuned by
    what it prevents: after each commit a batch that is not full gathers records a
    moment (``not_before``). The moment doubles when a transaction's records took
    ``RETRIED_S`` or more to be acknowledged (the sign of that retry), and shrinks by a
    five-hundredth after each that did not (at most ``settle_max_s``).

    When a transaction fails, librdkafka says how bad it is. A *fatal* error (this
    producer was fenced by a newer one with its transactional id) ends the replica
    with :class:`DeliveryError`. Anything else is aborted and raised as
    :class:`TransactionAborted`, so the batch is retried; after
    ``max_aborts`` aborts in a row with nothing committed in between, or at once when
    the abort itself fails, the replica gives up (``DeliveryError``) and is restarted.
    Every transactional call is watched by a :class:`CallWatchdog`.

    A batch's records are waited for before its commit, not inside it: a
    ``commit_transaction`` cannot be cut short, and once one has begun librdkafka
    can no longer abort the transaction. So a replica asked to stop while Kafka is
    away aborts the transaction at its deadline (its records were never shown) and
    says so, instead of sitting in the commit past its bound.
    """

    # The longest a batch waits after a commit for the coordinator to finish it.
    settle_max_s = 0.01
    # Records of a transaction acknowledged this late met the coordinator's refusal:
    # librdkafka retries a refused partition after 20 ms.
    RETRIED_S = 0.02
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
    # How long a transaction's records may take to be acknowledged, and its commit.
    commit_timeout_s = 60.0
    # The longest one commit_transaction call waits: the commit goes on between calls.
    commit_slice_s = 1.0

    def __init__(
        self,
        producer: Producer,
        consumer: Consumer | None,
        *,
        watchdog: CallWatchdog | None = None,
        on_committed: Callable[[Offsets], None] | None = None,
        transaction_timeout_s: float | None = None,
        stopping: shutdown.Stopping | None = None,
        kafka_down: Callable[[], bool] = lambda: False,
        spare: Producer | None = None,
    ) -> None:
        """``spare``: a second transactional producer to take turns with (see above).
        ``on_committed`` hears the offsets of each committed transaction (for the lag);
        ``transaction_timeout_s`` is the producer's ``transaction.timeout.ms`` when the app
        sets one, and bounds ``send_offsets_to_transaction`` instead of the default.
        ``kafka_down`` says whether the client has lost every broker (the replica's
        KafkaWatch): a batch then asks before sending its offsets (see ``end_batch``)."""
        super().__init__(producer, stopping=stopping)
        if transaction_timeout_s is not None:
            self.send_offsets_timeout_s = transaction_timeout_s
        self.consumer = consumer
        self.watchdog = watchdog or CallWatchdog()
        self.on_committed = on_committed
        self._open = False
        self._aborts = 0  # transactions aborted in a row
        self._given_up = 0  # records of transactions aborted because the replica stopped
        self._kafka_down = kafka_down
        self._settle_s = 0.002  # how long a batch gathers after a commit (see above)
        self.clock = time.monotonic  # what ``not_before`` is measured with
        self._spare = spare
        for each in (producer, spare):
            if each is not None:
                with self.watchdog.bounded("init_transactions", 60):
                    each.init_transactions(60)

    def begin_batch(self) -> None:
        assert not self._open, "a transaction is open already"
        if self._spare is not None:  # the other one's last transaction is long complete
            self.producer, self._spare = self._spare, self.producer
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            self._failed(delivery.error_reason(exc), "begin_transaction", fatal=_fatal(exc))
        self._open = True

    def end_batch(self, offsets: Offsets) -> None:
        # The records are waited for here, in slices a stop is heard between: inside
        # commit_transaction the wait could not be cut short, nor the transaction aborted.
        flushing = self.clock()
        held = self.stopping.flush(self.producer, self.commit_timeout_s)
        retried = self.clock() - flushing >= self.RETRIED_S
        if held:
            if self.stopping.requested:
                self._given_up += held
            self._failed(
                f"Kafka did not acknowledge {held} of its records "
                + ("by the stop deadline" if self.stopping.requested else "in time"),
                "commit_transaction",
            )
        if (self.stopping.requested or self._kafka_down()) and (unreachable := self._unreachable()):
            # abort now: a commit would wait on a coordinator that is gone, and sending
            # the offsets can block past its timeout then (librdkafka#5456), past a stop
            # that comes meanwhile too (the stop watch then ends the replica, exit 75)
            self._failed(f"Kafka is unreachable ({unreachable})", "commit_transaction")
        call = "send_offsets_to_transaction"
        try:
            if offsets and self.consumer is not None:
                positions = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
                metadata = self.consumer.consumer_group_metadata()
                self._retrying(
                    call,
                    self.send_offsets_timeout_s,
                    lambda timeout: self.producer.send_offsets_to_transaction(
                        positions, metadata, timeout
                    ),
                )
            call = "commit_transaction"
            self._retrying(
                call,
                self.commit_timeout_s,
                lambda timeout: self.producer.commit_transaction(timeout),
                slice_s=self.commit_slice_s,
            )
        except KafkaException as exc:
            self._failed(delivery.error_reason(exc), call, fatal=_fatal(exc))
        finally:
            self._open = False
        self._aborts = 0
        if self._spare is None:
            self._settling(retried)
        if offsets and self.on_committed is not None:
            self.on_committed(offsets)

    def _settling(self, retried: bool) -> None:
        """After a commit: how long the next batch that is not full gathers records while
        the coordinator completes this one (the class docstring). ``retried``: this
        transaction's records met the refusal, so the last wait was too short."""
        if retried:
            self._settle_s = min(self._settle_s * 2, self.settle_max_s)
        else:
            self._settle_s = max(self._settle_s * 0.998, 0.0005)
        self.not_before = self.clock() + self._settle_s

    def _retrying(
        self,
        call: str,
        timeout_s: float,
        attempt: Callable[[float], None],
        *,
        slice_s: float | None = None,
    ) -> None:
        """Call again what failed retriably: librdkafka wants a transactional call repeated
        (another call in between fails with a conflict), up to three times.

        With ``slice_s``, each call waits at most that long: one that times out goes on
        in the background and is called again to resume it, until ``timeout_s`` or the
        stop deadline has passed, so a stop is heard within a slice. Once stopping, no
        call waits past the stop deadline, and none is called again after it.
        """
        deadline = time.monotonic() + timeout_s
        tries = 0
        while True:
            wait = min(timeout_s, self.stopping.left())
            if slice_s is not None:
                wait = max(0.0, min(slice_s, deadline - time.monotonic(), wait))
            try:
                with self.watchdog.bounded(call, wait):
                    attempt(wait)
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if (
                    not isinstance(error, KafkaError)
                    or not error.retriable()
                    or error.txn_requires_abort()
                    or error.fatal()
                ):
                    raise
                if slice_s is not None and error.code() == KafkaError._TIMED_OUT:
                    if time.monotonic() >= deadline or self.stopping.overdue:
                        raise
                    continue  # resumed
                tries += 1
                if tries == 3 or self.stopping.overdue:
                    raise
                log.warning("%s: %s; calling it again", call, error.str())

    def _unreachable(self) -> str | None:
        """Why no broker answers now, or None when one does (asked within a second)."""
        try:
            self.producer.list_topics(timeout=max(min(1.0, self.stopping.left()), 0.1))
        except KafkaException as exc:
            return delivery.error_reason(exc)
        return None

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
                if self.stopping.requested:
                    return  # given up, and counted: the replica is stopping
                time.sleep(aborted.retry_after)

    def _failed(self, reason: str, call: str, *, fatal: bool = False) -> NoReturn:
        unaborted = self.abort()
        if fatal:
            raise DeliveryError(f"transaction failed in {call}: {reason}") from None
        if self.stopping.requested:  # no retry, and no restart: say what became of it
            self.stop_notes.append(_aborted(unaborted))
            raise TransactionAborted(
                f"stopping: transaction aborted in {call}: {reason}", retry_after=0.0
            ) from None
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
        # stopping: briefly (an abort Kafka can answer takes milliseconds), if past the deadline
        timeout = 30.0 if not self.stopping.requested else max(min(self.stopping.left(), 2.0), 1.0)
        try:
            with self.watchdog.bounded("abort_transaction", timeout):
                self.producer.abort_transaction(timeout)
        except KafkaException as exc:
            reason = delivery.error_reason(exc)
            log.warning("abort failed: %s", reason)
            return reason
        finally:
            self._open = False
        return None

    def close(self, timeout: float = 30.0) -> int:
        """Abort a transaction left open; the records of transactions given up at the stop
        (what an abort leaves in flight is theirs, and only waited for)."""
        if self._open:
            self._given_up += len(self.producer)
            unaborted = self.abort()
            if self.stopping.requested:
                self.stop_notes.append(_aborted(unaborted))
        if self._spare is not None:  # its transactions all ended: it holds nothing to wait for
            self.stopping.flush(self._spare, min(timeout, 1.0))
        super().close(timeout)
        return self._given_up
