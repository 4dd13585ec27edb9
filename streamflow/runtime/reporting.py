"""What a replica with inlets tells of its batches once each is written.

A batch is told once, after its checkpoint says it is final, whatever it took to
get there (an aborted transaction's batches are read again and told when they are
written): the records in and out by port, the batch's time and size, the dead
letters (to the hook a test reads, to the metrics and to the log), and what the
logic counted itself (``count_skipped``, its own metrics). Records written outside
the batches (control reactions, model swaps) and rejected control records are told
here too, so each counter has one place that moves it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Message

from streamflow.api.streamlet import Streamlet
from streamflow.runtime import dlq
from streamflow.runtime.checkpoint import Tally
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings
from streamflow.schema.registry import UnreadableWriterSchema

__all__ = ["BatchReport", "DeadLetterHook"]

log = logging.getLogger("streamflow.runtime")

#: Told of every dead letter as it is written: the record, its inlet, the error, the kind
#: ("decode", "logic", "encode" or "control"). The testkit keeps them for a test to read.
DeadLetterHook = Callable[[Message, str, BaseException, str], None]


class BatchReport:
    """The metrics, log lines and dead-letter hook calls of one replica's batches."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        bindings: Bindings,
        metrics: Metrics,
        on_dead_letter: DeadLetterHook | None,
    ) -> None:
        self._streamlet = streamlet
        self._metrics = metrics
        self._on_dead_letter = on_dead_letter
        self._in = {
            i: metrics.port(metrics.records_in, i) for i, _ in bindings.inlets_by_topic.values()
        }
        self._out = {o: metrics.port(metrics.records_out, o) for o in bindings.outlets}
        self._skipped_exported: dict[str, int] = {}

    def told(self, tally: Tally) -> None:
        """A batch is written: its dead letters and counts are told (once, whatever retried)."""
        for msg, inlet, failure, kind in tally.dead:
            self._dead_lettered(msg, inlet, failure, kind)
        for inlet, count in tally.counts.items():
            self._in[inlet].inc(count)
        for outlet, count in tally.produced.items():
            self._out[outlet].inc(count)
        metrics = self._metrics
        metrics.batch_seconds.labels(**metrics.labels).observe(tally.seconds)
        metrics.batch_size.labels(**metrics.labels).observe(tally.n)
        self.export_skipped()

    def written_outside(self, outlet: str) -> None:
        """A record for ``outlet`` that belongs to no batch (a control reaction, a swap)."""
        self._out[outlet].inc()

    def control_rejected(self, msg: Message, inlet: str, error: Exception) -> None:
        """A control record that could not be read or applied, on its way to the DLQ."""
        if self._on_dead_letter is not None:
            self._on_dead_letter(msg, inlet, error, "control")
        self._metrics.port(self._metrics.records_dlq, inlet).inc()
        if isinstance(error, UnreadableWriterSchema):
            self._metrics.writer_schemas.dead_letter(inlet, error.writer)
        log.warning("control record rejected: %s", dlq.describe(error))

    def export_skipped(self) -> None:
        """Export what the logic counted (``count_skipped``, its own metrics) to the metrics."""
        context = self._streamlet.context
        metrics = self._metrics
        metrics.export_own(context.metrics)
        if context.skipped != self._skipped_exported:
            # the totals stay in the context (a test reads them); the counter gets what is new
            for reason, total in context.skipped.items():
                fresh = total - self._skipped_exported.get(reason, 0)
                if fresh > 0:
                    metrics.skipped.labels(**metrics.labels, reason=reason).inc(fresh)
            self._skipped_exported = dict(context.skipped)

    def _dead_lettered(self, msg: Message, inlet: str, error: BaseException, kind: str) -> None:
        if self._on_dead_letter is not None:
            self._on_dead_letter(msg, inlet, error, kind)
        metrics = self._metrics
        metrics.port(metrics.records_dlq, inlet).inc()
        metrics.port(metrics.errors, inlet, kind=kind).inc()
        if isinstance(error, UnreadableWriterSchema):
            metrics.writer_schemas.dead_letter(inlet, error.writer)
        log.warning(
            "dead-lettered a record from %s[%d]@%d: %s",
            msg.topic(),
            msg.partition(),
            msg.offset(),
            dlq.describe(error),
            extra={"error_kind": kind},
        )
