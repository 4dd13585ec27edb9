"""The ``serve()`` ingress's emitter, over Kafka in memory: route, encode, produce.

An output is written the same way whichever loop made it (a processor's batch, a
source, a ``serve()`` push, a control reaction): these check that the ``serve()``
path keeps what an ``Emit`` says (its key and its headers) beside the schema header.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Producer

from streamflow import Emit, Outlet, Streamlet
from streamflow.api.descriptor import describe
from streamflow.runtime.inmemory import MemoryBroker, MemoryProducer
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.serve import KafkaEmitter
from tests.runtime import memory_support
from tests.runtime.memory_support import OUT


class _Pushed(Streamlet):
    out = Outlet("out", "tests.runtime.Scaled")

    async def serve(self, emit: Any) -> None:  # the emitter is what these tests drive
        return None


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _emit(loop: asyncio.AbstractEventLoop, output: object) -> MemoryBroker:
    broker = MemoryBroker()
    producer = MemoryProducer(broker)
    emitter = KafkaEmitter(
        producer=cast(Producer, producer),
        descriptor=describe(_Pushed),
        bindings=memory_support.bindings(),
        metrics=Metrics(app="app", streamlet="unit", replica=0),
        loop=loop,
    )

    async def push() -> None:
        pushed = asyncio.ensure_future(emitter.emit(output))  # type: ignore[arg-type]
        while not pushed.done():
            producer.poll(0)  # the delivery callbacks, as the runner's poller thread calls them
            await asyncio.sleep(0)
        await pushed

    loop.run_until_complete(push())
    return broker


def test_a_pushed_emit_keeps_its_key_and_headers(loop: asyncio.AbstractEventLoop) -> None:
    broker = _emit(loop, Emit("out", {"id": "p0"}, key="k", headers={"trace": "abc"}))
    [msg] = broker.records(OUT)
    assert json.loads(msg.value() or b"") == {"id": "p0"}
    assert msg.key() == b"k"
    assert memory_support.headers_of(msg) == {
        "streamflow-schema": b"tests.runtime.Scaled",
        "trace": b"abc",
    }


def test_a_pushed_dict_has_only_the_schema_header_and_no_key(
    loop: asyncio.AbstractEventLoop,
) -> None:
    [msg] = _emit(loop, {"id": "p1"}).records(OUT)
    assert msg.key() is None
    assert memory_support.headers_of(msg) == {"streamflow-schema": b"tests.runtime.Scaled"}
