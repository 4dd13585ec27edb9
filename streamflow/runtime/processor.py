"""The consume → decode → logic → encode → produce loop of a replica with inlets.

One turn of the loop is one batch, and the batch is the unit of everything
else. A batch is what is queued when the turn starts, up to ``batch_size``
records (see :meth:`Processor._next_batch`): one record when the pipeline is
idle, so it adds no wait, and full batches under load, because records queue
up while the previous batch is processed. Control records are applied before
a batch, never inside it. The logic sees only records that decoded; a record
that does not decode, or whose logic raises, or whose outputs do not encode,
goes to the dead-letter topic with the error, and the rest of the batch
carries on. Offsets advance only through the
:mod:`~streamflow.runtime.delivery` strategy, after the outputs are safe. How
the logic is called (its four shapes, poison isolation) is
:mod:`~streamflow.runtime.invoker`'s; how outputs become records,
:mod:`~streamflow.runtime.writer`'s.

When a batch is final, and in what order its outputs, state and offsets are
written (under exactly-once, full batches share a transaction), is
:mod:`~streamflow.runtime.checkpoint`'s; when a transaction aborts, every batch
in it is rewound here and processed again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Backpressure, Record, Streamlet
from streamflow.runtime import dlq, shutdown
from streamflow.runtime.checkpoint import Checkpoint, Tally
from streamflow.runtime.control import ControlReader
from streamflow.runtime.delivery import Delivery, Headers, Offsets
from streamflow.runtime.health import HealthState
from streamflow.runtime.invoker import Invoker
from streamflow.runtime.lineage import carried
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings, OutletBinding
from streamflow.runtime.state.manager import StateManager
from streamflow.runtime.transactions import TransactionAborted
from streamflow.runtime.writer import HeaderCache, OutputWriter
from streamflow.schema.codecs import DecodeError, error_line
from streamflow.schema.registry import (
    RegistryRefused,
    RegistryUnavailable,
    UnreadableWriterSchema,
)

__all__ = ["DeadLetterHook", "Processor"]

log = logging.getLogger("streamflow.runtime")

_REGISTRY_RETRY_S = 2.0  # how long a batch waits for an unreachable schema registry
_Dead = tuple[Message, str, BaseException, str]
#: Told of every dead letter as it is written: the record, its inlet, the error, the kind
#: ("decode", "logic", "encode" or "control"). The testkit keeps them for a test to read.
DeadLetterHook = Callable[[Message, str, BaseException, str], None]


class Processor:
    """Runs the data loop of one replica until ``stop`` is set."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        descriptor: StreamletDescriptor,
        bindings: Bindings,
        consumer: Consumer,
        delivery: Delivery,
        metrics: Metrics,
        health: HealthState,
        control: ControlReader | None,
        loop: asyncio.AbstractEventLoop,
        stop: threading.Event,
        batch_size: int = 500,
        batch_timeout: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        on_dead_letter: DeadLetterHook | None = None,
        state: StateManager | None = None,
        lineage: bool = True,
    ) -> None:
        """``state``: the stores of a stateful streamlet (restored on assignment, written
        with each batch, see :mod:`streamflow.runtime.state.manager`). ``lineage``: copy
        the lineage headers of each input to its outputs (:mod:`streamflow.runtime.lineage`);
        off, no input's headers are read on the way to an output."""
        self.streamlet = streamlet
        self.descriptor = descriptor
        self.bindings = bindings
        self.consumer = consumer
        self.delivery = delivery
        self.metrics = metrics
        self.health = health
        self.control = control
        self.loop = loop
        self.stop = stop
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.clock = clock
        self.on_dead_letter = on_dead_letter
        self.state = state
        self.lineage = lineage
        self._accepting = True
        self._pending_pause = False
        self._skipped_exported: dict[str, int] = {}
        self._assigned_once = False
        self._backoff_until = 0.0
        self._last_batch = 0.0  # when the latest batch was taken (time.monotonic)
        self._produced_since_idle = False  # a batch ran since the loop last found no input
        self._revoked: set[tuple[str, int]] = set()  # by a rebalance, during _consume_more
        self._backoff_reason = ""
        self._checkpoint = Checkpoint(
            delivery=delivery,
            state=state,
            batch_size=batch_size,
            clock=clock,
            told=self._told,
            retry=self._read_again,
        )
        self._logic_step = f"the streamlet's {descriptor.logic.value}"  # where a stall is named
        self._writer = OutputWriter(descriptor, bindings)
        self._logic = Invoker(
            streamlet=streamlet,
            descriptor=descriptor,
            router=self._writer.router,
            loop=loop,
            state=state,
        )
        self._fast_outlet = _fast_outlet(descriptor, bindings)
        self._fast_headers: Headers = (
            self._writer.schema_headers(self._fast_outlet) if self._fast_outlet else []
        )
        self._in = {
            i: metrics.port(metrics.records_in, i) for i, _ in bindings.inlets_by_topic.values()
        }
        self._out = {o: metrics.port(metrics.records_out, o) for o in bindings.outlets}

    # -- lifecycle -----------------------------------------------------------

    def run(self) -> None:
        self.start()
        try:
            while not self.stop.is_set():
                self.turn()
        except shutdown.Overdue:
            # stopping, and Kafka took no more outputs by the deadline: the batch is left
            # unfinished (its offsets never stored, its transaction aborted by the close)
            self._checkpoint.drop()
            return
        except BaseException:
            self._checkpoint.drop()  # the delivery's close aborts it: nothing of it shows
            raise
        self._checkpoint.settle()  # what the last batches share is committed, not left to abort

    def start(self) -> None:
        """Join the group: subscribe to the inlets' topics."""
        self.consumer.subscribe(
            list(self.bindings.inlets_by_topic),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )

    def turn(self) -> int:
        """One turn of the loop: control, the between-batches hook, then at most one batch.

        Returns how many records were consumed: 0 when none were, or when the
        streamlet held them back before the batch; a batch handed back with
        ``Backpressure`` counts, and the turns after it return 0 while it waits.
        """
        health = self.health
        health.turned()
        if self.control is not None:
            self.control.poll(apply=self.apply_control, reject=self.reject_control)
        self.between_batches()
        self._gate()
        messages = self._next_batch()
        self.delivery.poll()
        if not self._accepting:
            health.progressed()  # waiting on the streamlet (a model) or a dependency, not stuck
            if messages:
                self._rewind(messages)
            return 0
        if not messages:
            return 0
        health.progressed()
        self.process_batch(messages)
        self._produced_since_idle = True
        return len(messages)

    def between_batches(self) -> None:
        """Run the streamlet's between-batches hook (a model swap, say) and write its outputs."""
        self.health.doing("the streamlet's between_batches")
        self._side_outputs(self.streamlet.between_batches(), input_key=None)

    def _next_batch(self) -> list[Message]:
        """The next batch, or none when a rebalance aborted the shared transaction."""
        messages = self._gather()
        # what this call took lies past the rewound batches: it is taken again later
        if self._checkpoint.retry_aborted_in_rebalance(messages):
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
            if not self._checkpoint.settle():  # nothing queued: what full batches share commits
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
        # A guarantee with a cost per batch (a transaction) spaces batches that are not
        # full; under load they are full, and after a pause the first one goes at once.
        interval = self.delivery.batch_interval_s
        if interval and len(messages) < size:
            wait = self._last_batch + interval - time.monotonic()
            if wait > 0:
                messages = self._consume_more(messages, size - len(messages), wait)
        self._last_batch = time.monotonic()
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
            if self._accepting:
                consumer.resume(partitions)
            else:
                self._pending_pause = True
        self._update_ready()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("revoked %s", _names(partitions))
        self._revoked.update((tp.topic, tp.partition) for tp in partitions)
        self._checkpoint.settle(in_rebalance=True)  # committed while the partitions are ours
        self.delivery.on_revoke(partitions)
        if self.state is not None:  # after the delivery: what is committed is all written
            self.state.on_revoke(partitions)
        self.metrics.forget_partitions([(tp.topic, tp.partition) for tp in partitions])

    def _gate(self) -> None:
        """Hold data while the streamlet cannot take it (e.g. no model loaded yet)."""
        accepting = self.streamlet.accepts_data() and self.clock() >= self._backoff_until
        if accepting != self._accepting or self._pending_pause:
            self._pending_pause = False
            assignment = self.consumer.assignment()
            if accepting:
                self.consumer.resume(assignment)
            elif assignment:
                self.consumer.pause(assignment)
            self._accepting = accepting
            self._update_ready()

    def _rewind(self, messages: list[Message], earlier: Offsets | None = None) -> None:
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

    def _cut(
        self, messages: list[Message], at: Message, run: int, starts: Offsets
    ) -> tuple[list[Message], int, Message]:
        """End the batch before ``at``: the records from it on are read again next batch.

        Returns the batch's messages, and the current run's length and last message
        without ``at`` (its partition's offset then stops before it).
        """
        index = next(i for i, m in enumerate(messages) if m is at)
        rest, kept = messages[index:], messages[:index]
        self._rewind(rest)
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

    def _update_ready(self) -> None:
        reasons = []
        if not self._assigned_once:
            reasons.append("waiting for a partition assignment")
        if not self._accepting:
            reasons.append(
                f"backing off: {self._backoff_reason}"
                if self.clock() < self._backoff_until
                else "the streamlet is not accepting data yet (e.g. no model loaded)"
            )
        self.health.set_ready(not reasons, reasons)

    # -- one batch -----------------------------------------------------------

    def process_batch(self, messages: list[Message]) -> None:
        started = time.perf_counter()
        offsets: Offsets = {}
        starts: Offsets = {}  # each partition's first offset in the batch
        dead: list[_Dead] = []
        # the records that decoded, and their messages (two lists: no tuple per record)
        records: list[Record] = []
        decoded: list[Message] = []
        keep, keep_message = records.append, decoded.append
        consumed = Record.consumed
        counts: dict[str, int] = {}
        inlets = self.bindings.inlets_by_topic
        if not messages:
            return
        # Records come in runs from one partition: what is per partition (its inlet, its
        # next offset, the count) is looked up and stored once per run, not per record;
        # the run's last message gives the offset (a record reads its own lazily).
        topic, partition, run, last = "", -1, 0, messages[0]
        inlet, codec = "", None
        # what the batch holds decoded, against its limit (schema.bounds: each record's is
        # known before it is decoded, so this is the most one batch can cost)
        held, budget = 0, self.bindings.max_batch_bytes
        for msg in messages:
            error = msg.error()
            if error is not None:
                log.warning("consumer error: %s", error.str())
                continue
            # Without an error, librdkafka always sets topic, partition and offset
            # (the stubs say Optional; a cast per field would cost on the hot path).
            this_topic: str = msg.topic()  # type: ignore[assignment]
            this_partition: int = msg.partition()  # type: ignore[assignment]
            if this_partition != partition or this_topic != topic:
                if run:
                    offsets[(topic, partition)] = last.offset() + 1  # type: ignore[operator]
                    counts[inlet] = counts.get(inlet, 0) + run
                topic, partition, run = this_topic, this_partition, 0
                inlet, codec = inlets[topic]
                starts.setdefault((topic, partition), msg.offset())  # type: ignore[arg-type]
            last = msg
            run += 1
            raw = msg.value()
            try:
                if raw is None:
                    raise DecodeError("record has no value (a tombstone)")
                value = codec.decode(raw)  # type: ignore[union-attr]
            except DecodeError as exc:
                dead.append((msg, inlet, exc, "decode"))
                continue
            except (RegistryUnavailable, RegistryRefused) as exc:
                # never a dead letter: the record is fine, the registry (or access to it) is not
                self._back_off(messages, Backpressure(str(exc), retry_after=_REGISTRY_RETRY_S))
                return
            except Exception as exc:  # a codec's own failure on these bytes: still this record's
                dead.append(
                    (msg, inlet, DecodeError(f"cannot decode: {error_line(exc)}"), "decode")
                )
                continue
            held += codec.last_size  # type: ignore[union-attr]
            if held > budget and records:
                # the rest waits for the next batch, this record with it
                messages, run, last = self._cut(messages, msg, run, starts)
                break
            keep(consumed(msg, value, inlet, topic, partition))
            keep_message(msg)
        if run:
            offsets[(topic, partition)] = last.offset() + 1  # type: ignore[operator]
            counts[inlet] = counts.get(inlet, 0) + run
        state = self.state
        try:
            if state is not None:
                state.writing(True)
            # a copy: logic that sorts or empties its list must not misalign our pairing
            self.health.doing(self._logic_step)
            results = self._logic(records.copy()) if records else []
        except Backpressure as exc:
            self._back_off(messages, exc)
            return
        finally:
            if state is not None:
                state.writing(False)
        checkpoint = self._checkpoint
        try:
            self.health.doing("writing the batch's outputs and committing it")
            checkpoint.begin()
            produced = self._produce_results(decoded, records, results, dead)
            for msg, _, failure, _ in dead:
                value, key, headers = dlq.dead_letter(msg, failure)
                self.delivery.produce(self.bindings.dlq_topic, value, key, headers)
        except TransactionAborted as aborted:  # from begin_batch: nothing was written
            checkpoint.abandon_open(aborted, messages)
            return
        n = len(messages)
        checkpoint.end(
            messages,
            starts,
            offsets,
            lambda: Tally(counts, produced, time.perf_counter() - started, n, dead),
        )

    def _told(self, tally: Tally) -> None:
        """A batch is written: its dead letters and counts are told (once, whatever retried)."""
        for msg, inlet, failure, kind in tally.dead:
            self._dead_lettered(msg, inlet, failure, kind)
        self._count(tally.counts, tally.produced, tally.seconds, tally.n)

    def _read_again(
        self, messages: list[Message], aborted: TransactionAborted, earlier: Offsets | None
    ) -> None:
        """A transaction aborted: its batches (from ``earlier``) and ``messages`` are
        processed again, after the abort's pause."""
        retry = Backpressure(str(aborted), retry_after=aborted.retry_after)
        self._back_off(messages, retry, kind="transaction-aborted", earlier=earlier)

    def _back_off(
        self,
        messages: list[Message],
        exc: Backpressure,
        *,
        kind: str = "backpressure",
        earlier: Offsets | None = None,
    ) -> None:
        """Retry the whole batch later (and the batches before it that ``earlier`` starts
        from): nothing of it was written, nothing is committed."""
        if self.state is not None:
            self.state.rollback()  # the retry starts from the state the batch started from
        self._rewind(messages, earlier)
        self._backoff_until = self.clock() + exc.retry_after
        self._backoff_reason = str(exc)
        self.metrics.port(self.metrics.errors, "*", kind=kind).inc()
        log.warning("backing off %.1fs, the batch will be retried: %s", exc.retry_after, exc)

    def _produce_results(
        self,
        messages: list[Message],
        records: list[Record],
        results: Sequence[Any],
        dead: list[_Dead],
    ) -> dict[str, int]:
        produced: dict[str, int] = {}
        produce = self.delivery.produce
        records_of = self._writer.records
        cache = HeaderCache()
        fast = self._fast_outlet
        fast_count = 0
        # Reading a consumed record's headers costs up to a microsecond (librdkafka parses
        # them, the client builds Python objects): done only where lineage is carried.
        lineage_on = self.lineage
        if fast is not None:
            fast_encode, fast_topic = fast.codec.encode, fast.topic
            fast_headers = self._fast_headers
            # the producer's own produce, without the delivery's wrapper call per record
            direct = self.delivery.direct_produce()
        for msg, record, result in zip(messages, records, results, strict=True):
            if fast is not None and type(result) is dict:
                # The common case: one record for the only outlet, the input's key kept.
                try:
                    data = fast_encode(result)
                except Exception as exc:
                    dead.append((msg, record.inlet, exc, "encode"))
                    continue
                fast_count += 1
                if fast_topic is not None:
                    # a scored record's run and row go with its output (runtime/lineage.py);
                    # they are two headers, so a record with fewer has none to carry
                    consumed_headers = msg.headers() if lineage_on else None
                    lineage = (
                        carried(consumed_headers)
                        if consumed_headers is not None and len(consumed_headers) > 1
                        else None
                    )
                    headers = fast_headers if lineage is None else fast_headers + lineage
                    try:
                        direct(fast_topic, data, msg.key(), headers=headers)
                    except BufferError:  # the queue is full: the delivery waits for room
                        produce(fast_topic, data, msg.key(), headers)
                continue
            if isinstance(result, BaseException):
                dead.append((msg, record.inlet, result, "logic"))
                continue
            try:
                written = records_of(
                    result,
                    input_key=record.key,
                    lineage=_lineage_of(msg) if lineage_on else None,
                    cache=cache,
                )
            except Exception as exc:
                dead.append((msg, record.inlet, exc, "encode"))
                continue
            for out in written:
                produced[out.outlet] = produced.get(out.outlet, 0) + 1
                if out.topic is not None:
                    produce(out.topic, out.value, out.key, out.headers)
        if fast_count:
            assert fast is not None
            produced[fast.outlet] = produced.get(fast.outlet, 0) + fast_count
        return produced

    @property
    def backing_off(self) -> str | None:
        """Why the streamlet's data is held after a ``Backpressure``, or None."""
        return self._backoff_reason if self.clock() < self._backoff_until else None

    @property
    def backoff_until(self) -> float:
        """When (on ``clock``) a batch that backed off is tried again."""
        return self._backoff_until

    def _dead_lettered(self, msg: Message, inlet: str, error: BaseException, kind: str) -> None:
        """Tell of a dead letter the batch wrote: the hook, the metrics, the log."""
        if self.on_dead_letter is not None:
            self.on_dead_letter(msg, inlet, error, kind)
        self.metrics.port(self.metrics.records_dlq, inlet).inc()
        self.metrics.port(self.metrics.errors, inlet, kind=kind).inc()
        if isinstance(error, UnreadableWriterSchema):
            self.metrics.writer_schemas.dead_letter(inlet, error.writer)
        log.warning(
            "dead-lettered a record from %s[%d]@%d: %s",
            msg.topic(),
            msg.partition(),
            msg.offset(),
            dlq.describe(error),
            extra={"error_kind": kind},
        )

    def _count(
        self, counts: dict[str, int], produced: dict[str, int], seconds: float, n: int
    ) -> None:
        for inlet, count in counts.items():
            self._in[inlet].inc(count)
        for outlet, count in produced.items():
            self._out[outlet].inc(count)
        labels = self.metrics.labels
        self.metrics.batch_seconds.labels(**labels).observe(seconds)
        self.metrics.batch_size.labels(**labels).observe(n)
        self._export_skipped()

    def _export_skipped(self) -> None:
        """Export what the logic counted (``count_skipped``, its own metrics) to the metrics."""
        context = self.streamlet.context
        self.metrics.export_own(context.metrics)
        if context.skipped != self._skipped_exported:
            # the totals stay in the context (a test reads them); the counter gets what is new
            for reason, total in context.skipped.items():
                fresh = total - self._skipped_exported.get(reason, 0)
                if fresh > 0:
                    self.metrics.skipped.labels(**self.metrics.labels, reason=reason).inc(fresh)
            self._skipped_exported = dict(context.skipped)

    # -- control -------------------------------------------------------------

    def apply_control(self, record: Record) -> None:
        self._side_outputs(self.streamlet.on_control(record.inlet, record), input_key=record.key)

    def _side_outputs(self, result: Any, *, input_key: str | None) -> None:
        """Outputs that belong to no data batch: control reactions, model swaps."""
        if asyncio.iscoroutine(result):
            result = self.loop.run_until_complete(result)
        self.metrics.set_state(self.streamlet.context.state)
        self._export_skipped()
        if result is None:
            return
        # an output outside the batches is its own transaction: none may be open
        self._checkpoint.settle()
        for out in self._writer.records(result, input_key=input_key):
            self._out[out.outlet].inc()
            if out.topic is not None:
                self.delivery.produce_unbatched(out.topic, out.value, out.key, out.headers)

    def reject_control(self, msg: Message, inlet: str, error: Exception) -> None:
        if self.on_dead_letter is not None:
            self.on_dead_letter(msg, inlet, error, "control")
        self.metrics.port(self.metrics.records_dlq, inlet).inc()
        if isinstance(error, UnreadableWriterSchema):
            self.metrics.writer_schemas.dead_letter(inlet, error.writer)
        log.warning("control record rejected: %s", dlq.describe(error))
        value, key, headers = dlq.dead_letter(msg, error)
        self._checkpoint.settle()
        self.delivery.produce_unbatched(self.bindings.dlq_topic, value, key, headers)


def _lineage_of(msg: Message) -> Callable[[], Headers | None]:
    """The input's lineage headers, read only when the writer has an output to give them."""
    return lambda: carried(msg.headers())


def _fast_outlet(descriptor: StreamletDescriptor, bindings: Bindings) -> OutletBinding | None:
    """The outlet a plain dict result goes to unchanged, when there is exactly one and
    it has no key function (so the input's key bytes are kept as they are)."""
    if len(descriptor.outlets) != 1:
        return None
    port = descriptor.outlets[0]
    if port.keyed:
        return None
    return bindings.outlets[port.name]


def _where(msg: Message) -> tuple[str, int]:
    return cast(str, msg.topic()), cast(int, msg.partition())


def _names(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
