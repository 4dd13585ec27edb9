"""One HTTP ingress replica for ``bench.ingress``: HttpIngress serving, Kafka acknowledging.

Run as a script with ``PYTHONPATH`` naming the ``streamflow`` to measure (the
working tree, or an older revision unpacked by the driver), so the same file
serves both sides. The emitter is this file's, not the runtime's, and is the
same on both sides: it produces to the shared broker and resolves each emit
from the delivery callback, so ``202`` still means "Kafka has it".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

import streamflow
from streamflow.api import config as config_mod
from streamflow.api import describe
from streamflow.api.ports import Emit, Outlet
from streamflow.api.streamlet import Context, EmitError
from streamflow.schema import SchemaStore
from streamflow.streamlets.io import HttpIngress

SCHEMA = {
    "type": "record",
    "name": "IngressRecord",
    "namespace": "bench",
    "fields": [{"name": "id", "type": "string"}, {"name": "value", "type": "double"}],
}


class BenchIngress(HttpIngress):
    out = Outlet("out", "bench.IngressRecord")


class AckingEmitter:
    def __init__(self, producer: Producer, topic: str, loop: asyncio.AbstractEventLoop) -> None:
        self.producer, self.topic, self.loop = producer, topic, loop

    async def emit(self, output: dict[str, Any] | Emit, *, timeout: float = 10.0) -> None:
        assert isinstance(output, Emit)
        future: asyncio.Future[None] = self.loop.create_future()

        def acked(err: Any, msg: Any) -> None:
            self.loop.call_soon_threadsafe(_settle, future, err)

        self.producer.produce(self.topic, json.dumps(output.value).encode(), on_delivery=acked)
        await asyncio.wait_for(future, timeout)


def _settle(future: asyncio.Future[None], err: Any) -> None:
    if not future.done():
        future.set_exception(EmitError(str(err))) if err else future.set_result(None)


async def main(bootstrap: str, topic: str) -> None:
    schemas = Path(tempfile.mkdtemp())
    (schemas / "IngressRecord.avsc").write_text(json.dumps(SCHEMA))
    parsed = config_mod.parse_config(describe(BenchIngress), {"host": "127.0.0.1", "port": 0})
    ingress = BenchIngress(parsed)
    context = Context(
        app="bench", streamlet="ingress", replica=0, config=parsed,
        logger=logging.getLogger("bench.ingress"),
        schema_store=SchemaStore([schemas]),
    )  # fmt: skip
    ingress.context = context
    ingress.setup(context)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    stop = threading.Event()
    poller = threading.Thread(target=lambda: [producer.poll(0.05) for _ in iter(stop.is_set, True)])
    poller.start()
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(ingress.serve(AckingEmitter(producer, topic, loop)))
    await ingress.listening.wait()
    print(json.dumps({"port": ingress.bound_port, "streamflow": streamflow.__file__}), flush=True)
    await asyncio.to_thread(sys.stdin.read)  # the driver closes stdin to stop us
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    stop.set()
    poller.join()
    producer.flush(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    asyncio.run(main(args.bootstrap, args.topic))
