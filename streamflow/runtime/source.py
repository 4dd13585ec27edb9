"""The loop of an ingress replica: pull from ``source()``, encode, produce.

Backpressure: at most ``MAX_QUEUED`` records are handed to the producer and not
yet acknowledged. Past that, and whenever the producer's own queue is full, the
loop stops pulling from the source and waits for acknowledgements, a slice at a
time (a stop is heard between two): a source that outruns Kafka, or runs while
Kafka is away, is held back instead of piling records up. Outputs are grouped in
chunks (a transaction per chunk under exactly-once, which holds the source back
by itself: the next chunk waits for the commit). A finite source that ends
leaves the replica idle but healthy, rather than exiting and being restarted
into producing its data again.

What the replica says it sent is what Kafka has: a record counts as delivered on
its delivery report (at-least-once: the producer reports each, see
``delivery.CountedOutputs``) or when its chunk's transaction commits
(exactly-once), never when it is produced; queued records are counted apart.
Both are metrics (``streamflow_records_delivered``, ``streamflow_records_queued``)
and a log line every ``REPORT_EVERY_S`` while they move. At a stop, what Kafka
has not taken by the deadline is given up, counted, and told in the replica's
last line (:mod:`streamflow.runtime.shutdown`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from streamflow.api import aio
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Streamlet
from streamflow.runtime import shutdown
from streamflow.runtime.delivery import Delivery, Headers
from streamflow.runtime.health import HealthState
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings
from streamflow.runtime.transactions import TransactionAborted
from streamflow.runtime.writer import OutputWriter

__all__ = ["MAX_QUEUED", "REPORT_EVERY_S", "SourceRunner"]

log = logging.getLogger("streamflow.runtime")

_CHUNK = 500
_CHUNK_SECONDS = 0.1
MAX_QUEUED = 10 * _CHUNK  # records handed to the producer and not yet acknowledged, at most
REPORT_EVERY_S = 30.0

_Output = tuple[str, bytes, bytes | None, Headers]


class SourceRunner:
    """Runs ``source()`` into Kafka until stopped; the stop deadline is the delivery's."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        descriptor: StreamletDescriptor,
        bindings: Bindings,
        delivery: Delivery,
        metrics: Metrics,
        health: HealthState,
        loop: asyncio.AbstractEventLoop,
        stop: threading.Event,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        if not delivery.transactional and delivery.acknowledged() is None:
            raise TypeError(
                "a source's delivery must hear every delivery report (its producer made "
                "with delivery.CountedOutputs): what it says it delivered is what Kafka has"
            )
        self.streamlet = streamlet
        self.bindings = bindings
        self.delivery = delivery
        self.stopping = delivery.stopping
        self.metrics = metrics
        self.health = health
        self.loop = loop
        self.stop = stop
        self.max_queued = max_queued
        self._writer = OutputWriter(descriptor, bindings)
        self._out = {o: metrics.port(metrics.records_out, o) for o in bindings.outlets}
        self._delivered_total = metrics.records_delivered.labels(**metrics.labels)
        self._queued_now = metrics.records_queued.labels(**metrics.labels)
        # the open chunk's records, to write again if its transaction is aborted
        self._keep = delivery.transactional
        self._chunk: list[_Output] = []
        self._chunk_open = False  # begun and not yet ended
        self.handed = 0  # records given to the producer (once each, whatever is rewritten)
        self._committed = 0  # exactly-once: the records of committed chunks
        self._dropped = 0  # encoded, but never handed over: the stop deadline came first
        self._exported = 0  # of the delivered, those added to the metric
        self._reported = (0, 0)
        self._reported_at = time.monotonic()

    @property
    def delivered(self) -> int:
        """Records Kafka has: acknowledged (at-least-once) or committed (exactly-once)."""
        if self.delivery.transactional:
            return self._committed
        return self.delivery.acknowledged() or 0

    @property
    def queued(self) -> int:
        """Records handed to the producer that Kafka does not have yet."""
        return self.handed - self.delivered

    def run(self) -> None:
        self.health.set_ready(True)
        self.stopping.pending = lambda: self.queued + self._dropped  # for the stop's watch
        source = aio.open_source(getattr(self.streamlet, "source")())  # noqa: B009
        puller = _Puller(source, loop=self.loop)
        finished = False
        try:
            finished = self._pump(puller)
        except shutdown.Overdue:
            pass  # stopping, and Kafka took no more by the deadline: counted below
        except BaseException:  # the source or a fatal delivery error: no retry of what is open
            if self._chunk_open:
                self.delivery.end_batch({})
            raise
        if finished and not self.stop.is_set():
            log.info(
                "source finished after %d records (%d delivered, %d queued); idling until stopped",
                self.handed,
                self.delivered,
                self.queued,
            )
            while not self.stop.wait(0.5):
                self.health.turned()
                self.delivery.poll()
                self._report()
        self._stopped()

    def _pump(self, puller: _Puller) -> bool:
        """Write chunk after chunk until the source ends (True) or a stop is requested;
        each is ended (committed, under exactly-once) before the next begins."""
        while True:
            self.delivery.begin_batch()
            self._chunk_open = True
            exhausted = self._fill(puller)
            self.health.doing("writing a chunk of the source's records")
            self._report()  # exactly-once: the chunk's records wait for its commit
            self._end_chunk()
            self.health.turned()
            self._report()
            if exhausted:
                return True
            if self.stop.is_set():
                return False

    def _fill(self, puller: _Puller) -> bool:
        """Pull and write one chunk's items (``_CHUNK``, or for ``_CHUNK_SECONDS``); True
        when the source has ended."""
        taken, started = 0, time.monotonic()
        while taken < _CHUNK and time.monotonic() - started <= _CHUNK_SECONDS:
            if self.stop.is_set():
                return False
            if not self._room():
                continue
            item = puller.get(timeout=_CHUNK_SECONDS)
            if item is _EXHAUSTED:
                return True
            if item is not _NOTHING:
                self.emit(item)
                taken += 1
        return False

    def _room(self) -> bool:
        """Whether Kafka holds back fewer than ``max_queued`` records; if not, wait one
        slice for acknowledgements (the source is not pulled meanwhile)."""
        if self.queued < self.max_queued:
            return True
        self._report()
        self.health.turned()  # waiting on Kafka, not stuck
        self.health.doing(f"waiting for Kafka to acknowledge {self.queued} records")
        self.delivery.producer.poll(shutdown.SLICE_S)
        self.delivery.poll()
        return False

    def _end_chunk(self) -> None:
        """Commit the chunk; under exactly-once an aborted one is written again.

        A source cannot be rewound (its generator has moved on), so the chunk's encoded
        records are kept until its transaction commits. An aborted one (a broker restart,
        a request that timed out) showed none of them to ``read_committed`` readers;
        written again, each is there once. After ``max_aborts`` in a row the delivery
        gives up and the replica ends.
        """
        while True:
            self._chunk_open = False  # ended, whatever the end raises
            try:
                self.delivery.end_batch({})
                self._committed += len(self._chunk)  # kept only under exactly-once
                break
            except TransactionAborted as aborted:
                if self.stop.wait(aborted.retry_after):
                    break  # stopping: the aborted chunk was never shown, nor is it now
                log.warning("%s; writing the chunk's %d records again", aborted, len(self._chunk))
                self.delivery.begin_batch()
                self._chunk_open = True
                for topic, data, key, headers in self._chunk:
                    self.delivery.produce(topic, data, key, headers)
        self._chunk.clear()

    def emit(self, item: Any) -> None:
        records: list[_Output] = []
        for out in self._writer.records(item, input_key=None):
            self._out[out.outlet].inc()
            if out.topic is not None:
                records.append((out.topic, out.value, out.key, out.headers))
        for at, record in enumerate(records):
            try:
                self.delivery.produce(*record)  # waits while the producer's queue is full
            except shutdown.Overdue:
                self._dropped += len(records) - at
                raise
            self.handed += 1
            if self._keep:
                self._chunk.append(record)
        self.delivery.poll()

    def _stopped(self) -> None:
        """What is queued gets until the stop deadline; what Kafka has not then is told.

        The delivery is closed here (the replica's own close after it finds nothing
        left): its flush is the wait, and it aborts a transaction left open.
        """
        self.delivery.close()
        lost = self.queued + self._dropped
        self._report(force=True)
        log.info("source: %d records delivered, %d not delivered", self.delivered, lost)
        self.stopping.tell(lost, *self.delivery.stop_notes)

    def _report(self, *, force: bool = False) -> None:
        """Export the counts; log them every ``REPORT_EVERY_S`` while they move."""
        delivered, queued = self.delivered, self.queued
        self._queued_now.set(queued)
        if delivered > self._exported:
            self._delivered_total.inc(delivered - self._exported)
            self._exported = delivered
        now = time.monotonic()
        unchanged = (delivered, queued) == self._reported
        if force or unchanged or now - self._reported_at < REPORT_EVERY_S:
            return
        self._reported, self._reported_at = (delivered, queued), now
        if queued >= self.max_queued:
            log.warning(
                "source: %d records delivered, %d queued: held back until Kafka acknowledges them",
                delivered,
                queued,
            )
        else:
            log.info("source: %d records delivered, %d queued", delivered, queued)


_NOTHING = object()
_EXHAUSTED = object()


class _Puller:
    """Takes items from a source without ever blocking the loop past a timeout.

    A sync generator may block (following a file, pacing a rate), so it runs
    on a thread that fills a small bounded queue: memory stays bounded, and the
    loop still sees a stop request within one timeout. An async generator runs
    on the replica's event loop; its pending ``anext`` is kept across timeouts
    rather than cancelled, since cancelling would close the generator.
    """

    def __init__(self, source: Any, *, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._async = isinstance(source, AsyncIterator)
        self._source = source
        self._pending: asyncio.Future[Any] | None = None
        self._queue: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=_CHUNK)
        if not self._async:
            threading.Thread(target=self._pump, daemon=True, name="source").start()

    def _pump(self) -> None:
        try:
            for item in self._source:
                self._queue.put((True, item))
        except BaseException as exc:  # surfaced on the loop's thread
            self._queue.put((False, exc))
            return
        self._queue.put((False, None))

    def get(self, *, timeout: float) -> Any:
        if self._async:
            return self._get_async(timeout)
        try:
            ok, item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return _NOTHING
        if ok:
            return item
        if item is not None:
            raise item
        return _EXHAUSTED

    def _get_async(self, timeout: float) -> Any:
        if self._pending is None:
            self._pending = asyncio.ensure_future(anext(self._source), loop=self.loop)
        done, _ = self.loop.run_until_complete(asyncio.wait({self._pending}, timeout=timeout))
        if not done:
            return _NOTHING
        pending, self._pending = self._pending, None
        try:
            return pending.result()
        except StopAsyncIteration:
            return _EXHAUSTED
