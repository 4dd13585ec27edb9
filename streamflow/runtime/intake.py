"""The consumer side of a replica with inlets: the group, the batches it takes, the gate.

The intake joins the consumer group and follows its rebalances (a partition's
state is restored before any of its records is read; what full batches share is
committed while a revoked partition is still ours). It takes each batch: what
is queued when the turn starts, up to ``batch_size`` records (see
:meth:`Intake.next_batch`): one record when the pipeline is idle, so it adds no
wait, and full batches under load, because records queue up while the previous
batch is processed. It holds the data back (pauses every partition) while the
streamlet does not accept it or a batch is backing off, and it rewinds: a batch
handed back is read again from each partition's first offset in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import cast

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from streamflow.api.streamlet import Streamlet
from streamflow.runtime.checkpoint import Checkpoint
from streamflow.runtime.delivery import Delivery, Offsets
from streamflow.runtime.health import HealthState
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings
from streamflow.runtime.state.manager import StateManager

__all__ = ["Intake"]

log = logging.getLogger("streamflow.runtime")


class Intake:
    """One replica's consumer: see the module docstring."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        bindings: Bindings,
        consumer: Consumer,
        delivery: Delivery,
        checkpoint: Checkpoint,
        metrics: Metrics,
        health: HealthState,
        state: StateManager | None,
        batch_size: int,
        batch_timeout: float,
        clock: Callable[[], float],
    ) -> None:
        self.streamlet = streamlet
        self.bindings = bindings
        self.consumer = consumer
        self.delivery = delivery
        self.checkpoint = checkpoint
        self.metrics = metrics
        self.health = health
        self.state = state
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.clock = clock
        self.accepting = True  # whether the partitions are read (not paused by the gate)
        self._pending_pause = False
        self._assigned_once = False
        self._backoff_until = 0.0
        self._backoff_reason = ""
        self._produced_since_idle = False  # a batch ran since the loop last found no input
        self._revoked: set[tuple[str, int]] = set()  # by a rebalance, during _consume_more

    def produced(self) -> None:
        """A batch was processed: when the loop next finds no input, its outputs go at once."""
        self._produced_since_idle = True

    def back_off(
        self, messages: list[Message], retry_after: float, reason: str, earlier: Offsets | None
    ) -> None:
        """Hand ``messages`` back (and the batches before them, from ``earlier``) and hold
        the data for ``retry_after`` seconds."""
        self.rewind(messages, earlier)
        self._backoff_until = self.clock() + retry_after
        self._backoff_reason = reason

    @property
    def backing_off(self) -> str | None:
        """Why the streamlet's data is held after a ``Backpressure``, or None."""
        return self._backoff_reason if self.clock() < self._backoff_until else None

    @property
    def backoff_until(self) -> float:
        """When (on ``clock``) a batch that backed off is tried again."""
        return self._backoff_until

    def start(self) -> None:
        """Join the group: subscribe to the inlets' topics."""
        self.consumer.subscribe(
            list(self.bindings.inlets_by_topic),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )

    def next_batch(self) -> list[Message]:
        """The next batch, or none when a rebalance aborted the shared transaction."""
        messages = self._gather()
        # what this call took lies past the rewound batches: it is taken again later
        if self.checkpoint.retry_aborted_in_rebalance(messages):
            return []
        return messages

    def _gather(self) -> list[Message]:
        """What is queued now; when nothing is, wait for the first record and take it
        with whatever arrived alongside it. ``batch_timeout`` is the longest wait.

        librdkafka's ``consume(n, timeout)`` returns only once it holds ``n`` records or
        the timeout has passed, so asking for a full batch at a low rate added up to the
        whole timeout to every record's latency (p50 38 ms at 10% of the maximum rate).
        """
        size = self.batch_size
        messages = self.consumer.consume(size, 0)
        if not messages:
            if not self.checkpoint.settle():  # nothing queued: what full batches share commits
                return messages
            if self._produced_since_idle:
                # nothing more is coming yet: what the last batch produced goes now
                self._produced_since_idle = False
                self.delivery.idle()
            messages = self.consumer.consume(1, self.batch_timeout)
            if not messages:
                return messages
            if size > 1:
                messages = self._consume_more(messages, size - 1, 0)
        # Right after a commit, exactly-once lets a batch that is not full gather records
        # a moment longer (``ExactlyOnce.not_before``); full ones, and the first after a
        # pause, go at once.
        if len(messages) < size:
            wait = self.delivery.not_before - time.monotonic()
            if wait > 0:
                messages = self._consume_more(messages, size - len(messages), wait)
        return messages

    def _consume_more(self, taken: list[Message], more: int, timeout: float) -> list[Message]:
        """``taken`` and up to ``more`` records, less those of ``taken`` whose partition a
        rebalance revoked during this call.

        librdkafka drops a revoked partition's records only within one ``consume``; the
        ones this batch took in an earlier call belong to the partition's new owner now,
        which starts from the committed offset. Processed here too, they were written
        twice, and under exactly-once their offsets committed by a replica that no
        longer owned them.
        """
        self._revoked.clear()
        fresh = self.consumer.consume(more, timeout)
        if self._revoked:
            revoked = self._revoked
            taken = [m for m in taken if m.error() is not None or _where(m) not in revoked]
        return taken + fresh

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned_once = True
        log.info("assigned %s", _names(partitions))
        self.delivery.on_assign(partitions)
        self.metrics.own_partitions([(tp.topic, tp.partition) for tp in partitions])
        if self.state is not None:  # before consume returns any record of them
            self.state.on_assign(partitions)
        if partitions:
            # librdkafka keeps a partition's pause through a cooperative revoke and a
            # later assignment: one taken while the streamlet held data back would come
            # back paused, and never be read again. Each starts as the gate wants it.
            if self.accepting:
                consumer.resume(partitions)
            else:
                self._pending_pause = True
        self.update_ready()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("revoked %s", _names(partitions))
        self._revoked.update((tp.topic, tp.partition) for tp in partitions)
        self.checkpoint.settle(in_rebalance=True)  # committed while the partitions are ours
        self.delivery.on_revoke(partitions)
        if self.state is not None:  # after the delivery: what is committed is all written
            self.state.on_revoke(partitions)
        self.metrics.forget_partitions([(tp.topic, tp.partition) for tp in partitions])

    def gate(self) -> None:
        """Hold data while the streamlet cannot take it (e.g. no model loaded yet)."""
        accepting = self.streamlet.accepts_data() and self.clock() >= self._backoff_until
        if accepting != self.accepting or self._pending_pause:
            self._pending_pause = False
            assignment = self.consumer.assignment()
            if accepting:
                self.consumer.resume(assignment)
            elif assignment:
                self.consumer.pause(assignment)
            self.accepting = accepting
            self.update_ready()

    def rewind(self, messages: list[Message], earlier: Offsets | None = None) -> None:
        """Seek each partition back to its first record in ``messages`` (in offset order),
        or to its offset in ``earlier`` (batches before them), where it has one."""
        first: Offsets = dict(earlier) if earlier else {}
        for msg in messages:
            if msg.error() is None:
                first.setdefault(_where(msg), cast(int, msg.offset()))
        for (topic, partition), offset in first.items():
            try:
                self.consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                # revoked meanwhile (a rebalance aborted the transaction, say): its new
                # owner starts from the committed offset, which this batch never moved
                log.info("not rewinding %s[%d]: %s", topic, partition, exc.args[0].str())
        self._pending_pause = True

    def cut(
        self, messages: list[Message], at: Message, run: int, starts: Offsets
    ) -> tuple[list[Message], int, Message]:
        """End the batch before ``at``: the records from it on are read again next batch.

        Returns the batch's messages, and the current run's length and last message
        without ``at`` (its partition's offset then stops before it).
        """
        index = next(i for i, m in enumerate(messages) if m is at)
        rest, kept = messages[index:], messages[:index]
        self.rewind(rest)
        where = _where(at)
        if run == 1 and starts.get(where) == at.offset():
            del starts[where]  # the run was this record alone: nothing of it is in the batch
        before = next((m for m in reversed(kept) if m.error() is None), at)
        log.info(
            "a batch of %d records cut after %d: what it decodes to reached %d bytes "
            "(decode_limits.max_batch_bytes)",
            len(messages),
            len(kept),
            self.bindings.max_batch_bytes,
        )
        return kept, run - 1, before

    def update_ready(self) -> None:
        reasons = []
        if not self._assigned_once:
            reasons.append("waiting for a partition assignment")
        if not self.accepting:
            reasons.append(
                f"backing off: {self._backoff_reason}"
                if self.clock() < self._backoff_until
                else "the streamlet is not accepting data yet (e.g. no model loaded)"
            )
        self.health.set_ready(not reasons, reasons)


def _where(msg: Message) -> tuple[str, int]:
    return cast(str, msg.topic()), cast(int, msg.partition())


def _names(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
