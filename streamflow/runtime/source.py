"""The loop of an ingress replica: pull from ``source()``, encode, produce.

Backpressure comes from the producer: when its queue is full, ``produce``
waits for deliveries instead of buffering more, so a fast source is slowed to
what Kafka takes and memory stays bounded. Outputs are grouped in chunks (a
transaction per chunk under exactly-once). A finite source that ends leaves
the replica idle but healthy, rather than exiting and being restarted into
producing its data again.
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
from streamflow.api import outputs as outputs_mod
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Streamlet
from streamflow.runtime.delivery import Delivery, Headers, TransactionAborted
from streamflow.runtime.health import HealthState
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings

__all__ = ["SourceRunner"]

log = logging.getLogger("streamflow.runtime")

_CHUNK = 500
_CHUNK_SECONDS = 0.1


class SourceRunner:
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
    ) -> None:
        self.streamlet = streamlet
        self.bindings = bindings
        self.delivery = delivery
        self.metrics = metrics
        self.health = health
        self.loop = loop
        self.stop = stop
        self._router = outputs_mod.OutputRouter(descriptor)
        self._out = {o: metrics.port(metrics.records_out, o) for o in bindings.outlets}
        # the open chunk's records, to write again if its transaction is aborted
        self._keep = delivery.transactional
        self._chunk: list[tuple[str, bytes, bytes | None, Headers]] = []

    def run(self) -> None:
        self.health.set_ready(True)
        source = aio.open_source(getattr(self.streamlet, "source")())  # noqa: B009
        puller = _Puller(source, loop=self.loop)
        count = 0
        chunk_started = time.monotonic()
        self.delivery.begin_batch()
        ended = False
        try:
            while not self.stop.is_set():
                item = puller.get(timeout=_CHUNK_SECONDS)
                if item is _EXHAUSTED:
                    break
                if item is not _NOTHING:
                    self.emit(item)
                    count += 1
                if count % _CHUNK == 0 or time.monotonic() - chunk_started > _CHUNK_SECONDS:
                    self.health.doing("writing a chunk of the source's records")
                    self._end_chunk()
                    self.health.turned()
                    self.delivery.begin_batch()
                    chunk_started = time.monotonic()
            ended = True
        finally:
            if ended:
                self._end_chunk()
            else:  # the source or a fatal delivery error: no retry of what is open
                self.delivery.end_batch({})
        if self.stop.is_set():
            return
        log.info("source finished after %d items; idling until stopped", count)
        while not self.stop.wait(0.5):
            self.health.turned()
            self.delivery.poll()

    def _end_chunk(self) -> None:
        """Commit the chunk; under exactly-once an aborted one is written again.

        A source cannot be rewound (its generator has moved on), so the chunk's encoded
        records are kept until its transaction commits. An aborted one (a broker restart,
        a request that timed out) showed none of them to ``read_committed`` readers;
        written again, each is there once. After ``max_aborts`` in a row the delivery
        gives up and the replica ends.
        """
        while True:
            try:
                self.delivery.end_batch({})
                break
            except TransactionAborted as aborted:
                log.warning("%s; writing the chunk's %d records again", aborted, len(self._chunk))
                if self.stop.wait(aborted.retry_after):
                    break  # stopping: the aborted chunk was never shown, nor is it now
                self.delivery.begin_batch()
                for topic, data, key, headers in self._chunk:
                    self.delivery.produce(topic, data, key, headers)
        self._chunk.clear()

    def emit(self, item: Any) -> None:
        outlets = self.bindings.outlets
        for out in self._router.route(item, input_key=None):
            binding = outlets[out.outlet]
            data = binding.codec.encode(out.value)
            self._out[out.outlet].inc()
            if binding.topic is None:
                continue
            headers: Headers = [("streamflow-schema", binding.schema_header)]
            if out.headers:
                headers += [(k, v.encode()) for k, v in out.headers.items()]
            key = out.key.encode() if out.key is not None else None
            self.delivery.produce(binding.topic, data, key, headers)
            if self._keep:
                self._chunk.append((binding.topic, data, key, headers))
        self.delivery.poll()


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
