"""The consume → decode → logic → encode → produce loop of a replica with inlets.

One turn of the loop is one batch, and the batch is the unit of everything
else. Control records are applied before a batch, never inside it. The logic
sees only records that decoded; a record that does not decode, or whose logic
raises, or whose outputs do not encode, goes to the dead-letter topic with the
error, and the rest of the batch carries on. A batch's decoded size is bounded
(``decode_limits.max_batch_bytes``): past it the batch is cut, and the rest is
read again next turn.

The processor decodes and sorts; the other jobs are each a module's:

- :mod:`~streamflow.runtime.intake`: the consumer group, taking batches, the
  gate that holds data back, rewinds;
- :mod:`~streamflow.runtime.reading`: a batch's messages decoded into records,
  cut at its size bound;
- :mod:`~streamflow.runtime.invoker`: calling the logic in its four shapes,
  isolating poison records;
- :mod:`~streamflow.runtime.writer`: outputs as records (topic, value, key,
  headers);
- :mod:`~streamflow.runtime.columnar`: the batch of a ``process_columns`` streamlet,
  columns in and out;
- :mod:`~streamflow.runtime.checkpoint`: when a batch is final, in what order its
  outputs, state and offsets are written, and the exactly-once transaction full
  batches share. Offsets advance only there, after the outputs are safe;
- :mod:`~streamflow.runtime.reporting`: what a written batch tells (counts, dead
  letters, the logic's own counters).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, Message

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Backpressure, Logic, Record, Streamlet
from streamflow.runtime import dlq, shutdown
from streamflow.runtime.checkpoint import Checkpoint, Tally
from streamflow.runtime.control import ControlReader
from streamflow.runtime.delivery import Delivery, Offsets
from streamflow.runtime.dlq import Dead
from streamflow.runtime.health import HealthState
from streamflow.runtime.intake import Intake
from streamflow.runtime.invoker import Invoker
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings
from streamflow.runtime.reading import read_records
from streamflow.runtime.reporting import BatchReport, DeadLetterHook
from streamflow.runtime.state.manager import StateManager
from streamflow.runtime.transactions import TransactionAborted
from streamflow.runtime.writer import BatchWriter, OutputWriter
from streamflow.schema.registry import RegistryRefused, RegistryUnavailable

if TYPE_CHECKING:
    from streamflow.runtime.column_inlets import ColumnInlets
    from streamflow.runtime.columnar import ColumnarPath

__all__ = ["Processor"]

log = logging.getLogger("streamflow.runtime")

_REGISTRY_RETRY_S = 2.0  # how long a batch waits for an unreachable schema registry


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
        self.state = state
        self.lineage = lineage
        self._report = BatchReport(
            streamlet=streamlet, bindings=bindings, metrics=metrics, on_dead_letter=on_dead_letter
        )
        self._checkpoint = Checkpoint(
            delivery=delivery,
            state=state,
            batch_size=batch_size,
            clock=clock,
            told=self._report.told,
            retry=self._read_again,
        )
        self.intake = Intake(
            streamlet=streamlet,
            bindings=bindings,
            consumer=consumer,
            delivery=delivery,
            checkpoint=self._checkpoint,
            metrics=metrics,
            health=health,
            state=state,
            batch_size=batch_size,
            batch_timeout=batch_timeout,
            clock=clock,
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
        # a process_columns streamlet's batches go through the columnar path instead
        self._columnar: ColumnarPath | None = None
        if descriptor.logic is Logic.PROCESS_COLUMNS:
            # imported here: numpy's start-up is only a columnar streamlet's to pay
            from streamflow.runtime.columnar import ColumnarPath

            self._columnar = ColumnarPath(
                streamlet=streamlet,
                descriptor=descriptor,
                bindings=bindings,
                loop=loop,
                lineage=lineage,
            )
        self._results = BatchWriter(self._writer, descriptor, bindings, delivery, lineage=lineage)
        self._column_inlets: ColumnInlets | None = None
        if descriptor.column_inlets:
            from streamflow.runtime.column_inlets import ColumnInlets

            self._column_inlets = ColumnInlets(bindings, descriptor.column_inlets)

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
        self.intake.start()

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
        intake = self.intake
        intake.gate()
        messages = intake.next_batch()
        self.delivery.poll()
        if not intake.accepting:
            health.progressed()  # waiting on the streamlet (a model) or a dependency, not stuck
            if messages:
                intake.rewind(messages)
            return 0
        if not messages:
            return 0
        health.progressed()
        self.process_batch(messages)
        intake.produced()
        return len(messages)

    def between_batches(self) -> None:
        """Run the streamlet's between-batches hook (a model swap, say) and write its outputs."""
        self.health.doing("the streamlet's between_batches")
        self._side_outputs(self.streamlet.between_batches(), input_key=None)

    # -- one batch -----------------------------------------------------------

    def process_batch(self, messages: list[Message]) -> None:
        if self._columnar is not None:
            self._process_columns(self._columnar, messages)
            return
        if not messages:
            return
        started = time.perf_counter()
        try:
            read = read_records(
                messages, self.bindings, cut=self.intake.cut, column_inlets=self._column_inlets
            )
        except (RegistryUnavailable, RegistryRefused) as exc:
            # never a dead letter: the record is fine, the registry (or access to it) is not
            self._back_off(messages, Backpressure(str(exc), retry_after=_REGISTRY_RETRY_S))
            return
        records, dead = read.records, read.dead
        state = self.state
        try:
            if state is not None:
                state.writing(True)
            # a copy: logic that sorts or empties its list must not misalign our pairing
            self.health.doing(self._logic_step)
            results = self._logic(records.copy()) if records else []
        except Backpressure as exc:
            self._back_off(read.messages, exc)
            return
        finally:
            if state is not None:
                state.writing(False)
        self._write_and_end(
            read.messages,
            (read.starts, read.offsets, read.counts, dead, started),
            lambda: self._results.write(read.decoded, records, results, dead),
        )

    def _write_and_end(
        self,
        messages: list[Message],
        batch: tuple[Offsets, Offsets, dict[str, int], list[Dead], float],
        produce: Callable[[], dict[str, int]],
    ) -> None:
        """Write a batch's outputs (``produce``: how many went to each outlet) and its dead
        letters, then end it (:mod:`.checkpoint`). ``batch``: each partition's first and
        next offsets, the counts per inlet, the dead letters and when the batch began."""
        starts, offsets, counts, dead, started = batch
        checkpoint = self._checkpoint
        try:
            self.health.doing("writing the batch's outputs and committing it")
            checkpoint.begin()
            produced = produce()
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

    def _process_columns(self, columnar: ColumnarPath, messages: list[Message]) -> None:
        """One batch of a ``process_columns`` streamlet (:mod:`.columnar`), written and
        ended as a record batch is."""
        started = time.perf_counter()
        try:
            read = columnar.read(messages)
        except (RegistryUnavailable, RegistryRefused) as exc:
            # never a dead letter: the records are fine, the registry (or access to it) is not
            self._back_off(messages, Backpressure(str(exc), retry_after=_REGISTRY_RETRY_S))
            return
        try:
            self.health.doing(self._logic_step)
            outputs = columnar.run(read)
        except Backpressure as exc:
            self._back_off(messages, exc)
            return
        self._write_and_end(
            messages,
            (read.starts, read.offsets, read.counts, read.dead, started),
            lambda: columnar.produce(self.delivery, outputs),
        )

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
        self.intake.back_off(messages, exc.retry_after, str(exc), earlier)
        self.metrics.port(self.metrics.errors, "*", kind=kind).inc()
        log.warning("backing off %.1fs, the batch will be retried: %s", exc.retry_after, exc)

    @property
    def backing_off(self) -> str | None:
        """Why the streamlet's data is held after a ``Backpressure``, or None."""
        return self.intake.backing_off

    @property
    def backoff_until(self) -> float:
        """When (on ``clock``) a batch that backed off is tried again."""
        return self.intake.backoff_until

    # -- control -------------------------------------------------------------

    def apply_control(self, record: Record) -> None:
        self._side_outputs(self.streamlet.on_control(record.inlet, record), input_key=record.key)

    def _side_outputs(self, result: Any, *, input_key: str | None) -> None:
        """Outputs that belong to no data batch: control reactions, model swaps."""
        if asyncio.iscoroutine(result):
            result = self.loop.run_until_complete(result)
        self.metrics.set_state(self.streamlet.context.state)
        self._report.export_skipped()
        if result is None:
            return
        # an output outside the batches is its own transaction: none may be open
        self._checkpoint.settle()
        for out in self._writer.records(result, input_key=input_key):
            self._report.written_outside(out.outlet)
            if out.topic is not None:
                self.delivery.produce_unbatched(out.topic, out.value, out.key, out.headers)

    def reject_control(self, msg: Message, inlet: str, error: Exception) -> None:
        self._report.control_rejected(msg, inlet, error)
        value, key, headers = dlq.dead_letter(msg, error)
        self._checkpoint.settle()
        self.delivery.produce_unbatched(self.bindings.dlq_topic, value, key, headers)
