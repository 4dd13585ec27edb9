"""The loop of a ``serve()`` ingress: the streamlet pushes, Kafka acknowledges.

An HTTP ingress must answer only once its records are safe, so
:class:`KafkaEmitter` resolves an asyncio future from the producer's delivery
callback. The callback runs on a poller thread (``producer.poll``), so it hands
the result back to the event loop with ``call_soon_threadsafe``. Memory stays
bounded: when the producer queue is full, ``emit`` fails at once (an HTTP
ingress answers 503) rather than buffers.

On a stop, ``serve()`` is cancelled and given until the stop deadline to return
(an HTTP ingress finishes the requests in flight); at the deadline the emits
still waiting for Kafka fail, so their callers are answered rather than cut off,
and what Kafka has not acknowledged is told in the replica's last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, Producer

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.ports import Emit
from streamflow.api.streamlet import EmitError, Streamlet
from streamflow.runtime import shutdown
from streamflow.runtime.health import HealthState
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings
from streamflow.runtime.writer import OutputWriter, Written

__all__ = ["KafkaEmitter", "ServeRunner"]

log = logging.getLogger("streamflow.runtime")

_SERVED_GRACE_S = 2.0  # for serve() to return once its emits failed at the deadline


class KafkaEmitter:
    def __init__(
        self,
        *,
        producer: Producer,
        descriptor: StreamletDescriptor,
        bindings: Bindings,
        metrics: Metrics,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._producer = producer
        self._writer = OutputWriter(descriptor, bindings)
        self._loop = loop
        self._out = {o: metrics.port(metrics.records_out, o) for o in bindings.outlets}
        self._waiting: set[asyncio.Future[None]] = set()  # emits Kafka has not answered

    def fail_waiting(self, reason: str) -> int:
        """Fail every emit still waiting for Kafka (with ``reason``); how many there were."""
        waiting, self._waiting = self._waiting, set()
        for future in waiting:
            if not future.done():
                future.set_exception(EmitError(reason))
        return len(waiting)

    async def emit(self, output: dict[str, Any] | Emit, *, timeout: float = 10.0) -> None:
        futures = [self._send(out) for out in self._writer.records(output, input_key=None)]
        try:
            await asyncio.wait_for(asyncio.gather(*futures), timeout)
        except TimeoutError:
            raise EmitError(f"Kafka did not acknowledge within {timeout:g}s") from None

    def _send(self, out: Written) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._loop.create_future()
        self._out[out.outlet].inc()
        if out.topic is None:
            future.set_result(None)
            return future

        def acked(err: KafkaError | None, msg: Any) -> None:
            self._loop.call_soon_threadsafe(_settle, future, err)

        self._waiting.add(future)
        future.add_done_callback(self._waiting.discard)

        try:
            self._producer.produce(
                out.topic, out.value, out.key, headers=out.headers, on_delivery=acked
            )
        except BufferError:
            future.set_exception(EmitError("the producer queue is full; Kafka is not keeping up"))
        return future


def _settle(future: asyncio.Future[None], err: KafkaError | None) -> None:
    if future.done():
        return
    if err is None:
        future.set_result(None)
    else:
        future.set_exception(EmitError(f"Kafka rejected the record: {err.str()}"))


class ServeRunner:
    def __init__(
        self,
        *,
        streamlet: Streamlet,
        descriptor: StreamletDescriptor,
        bindings: Bindings,
        producer: Producer,
        metrics: Metrics,
        health: HealthState,
        loop: asyncio.AbstractEventLoop,
        stop: threading.Event,
        stopping: shutdown.Stopping | None = None,
    ) -> None:
        self.streamlet = streamlet
        self.producer = producer
        self.stopping = stopping if stopping is not None else shutdown.Stopping(stop)
        self.health = health
        self.loop = loop
        self.stop = stop
        self.emitter = KafkaEmitter(
            producer=producer, descriptor=descriptor, bindings=bindings, metrics=metrics, loop=loop
        )

    def run(self) -> None:
        # Polling goes on until serve() has returned, not just until the stop request:
        # requests still in flight during the graceful shutdown wait on delivery callbacks.
        served = threading.Event()
        self.stopping.pending = lambda: len(self.producer)  # for the stop's watch
        poller = threading.Thread(target=self._poll, args=(served,), daemon=True)
        poller.start()
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            served.set()
            poller.join(timeout=self.stopping.cap(35.0) + 1.0)
        if held := len(self.producer):
            self.stopping.tell(held, "emit() failed for each of them")

    async def _serve(self) -> None:
        task = asyncio.ensure_future(getattr(self.streamlet, "serve")(self.emitter))  # noqa: B009
        self.health.set_ready(True)
        while not self.stop.is_set() and not task.done():
            self.health.turned()
            await asyncio.sleep(0.2)  # checks the stop flag set by a signal handler
        if not task.done():
            task.cancel()
        if not task.done():
            await asyncio.wait({task}, timeout=self.stopping.left())
        if not task.done():  # emits wait for a Kafka that is gone: answer their callers
            failed = self.emitter.fail_waiting("the replica is stopping and Kafka did not answer")
            await asyncio.wait({task}, timeout=_SERVED_GRACE_S)
            if not task.done():
                log.warning("serve() did not return after its stop (%d emits failed)", failed)
                return
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _poll(self, served: threading.Event) -> None:
        while not served.is_set():
            self.producer.poll(0.1)
        self.stopping.flush(self.producer, 30.0)
