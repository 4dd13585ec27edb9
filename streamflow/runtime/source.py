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
import threading
import time
from typing import Any

from streamflow.api import aio
from streamflow.api import outputs as outputs_mod
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Streamlet
from streamflow.runtime.delivery import Delivery, Headers
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

    def run(self) -> None:
        self.health.set_ready(True)
        source = getattr(self.streamlet, "source")()  # noqa: B009 - declared by subclasses
        items = aio.iterate_source(source, loop=self.loop)
        count = 0
        chunk_started = time.monotonic()
        self.delivery.begin_batch()
        for item in items:
            self.emit(item)
            count += 1
            if count % _CHUNK == 0 or time.monotonic() - chunk_started > _CHUNK_SECONDS:
                self.delivery.end_batch({})
                self.health.turned()
                if self.stop.is_set():
                    return
                self.delivery.begin_batch()
                chunk_started = time.monotonic()
        self.delivery.end_batch({})
        log.info("source finished after %d items; idling until stopped", count)
        while not self.stop.wait(0.5):
            self.health.turned()
            self.delivery.poll()

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
        self.delivery.poll()
