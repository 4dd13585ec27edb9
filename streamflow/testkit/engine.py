"""The runtime's own loops, wired to Kafka in memory, for one streamlet under test.

There is one implementation of calling logic, routing outputs, dead-lettering
and backpressure: the runtime's :class:`~streamflow.runtime.processor.Processor`,
:class:`~streamflow.runtime.control.ControlReader` and
:class:`~streamflow.runtime.source.SourceRunner`. The testkit does not mirror
them; it runs them over :mod:`streamflow.runtime.inmemory`, with at-least-once
delivery, a manual clock (a batch that backed off is retried on the next
``run()``, without sleeping) and codecs that check every output strictly.

Topics are named after the ports: an inlet's or control inlet's topic is its
name, an outlet's ``outlet:<name>``, and dead letters go to ``dead-letters``.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from confluent_kafka import Consumer, Message, Producer

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.outputs import RoutedOutput
from streamflow.api.streamlet import Streamlet
from streamflow.blueprint.model import changelog_topic
from streamflow.runtime.control import ControlInletBinding, ControlReader
from streamflow.runtime.delivery import AtLeastOnce, CountedOutputs
from streamflow.runtime.health import HealthState
from streamflow.runtime.inmemory import (
    MemoryBroker,
    MemoryChangelog,
    MemoryConsumer,
    MemoryProducer,
)
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings, OutletBinding
from streamflow.runtime.processor import Processor
from streamflow.runtime.reporting import DeadLetterHook
from streamflow.runtime.serve import ServeRunner
from streamflow.runtime.source import SourceRunner
from streamflow.runtime.state.manager import StateManager
from streamflow.testkit.ports import PortCodec

__all__ = ["DLQ_TOPIC", "EXHAUSTED", "Engine", "ManualClock", "outlet_topic"]

DLQ_TOPIC = "dead-letters"
_SCHEMA_HEADER = "streamflow-schema"
T = TypeVar("T")


def outlet_topic(outlet: str) -> str:
    return f"outlet:{outlet}"


class ManualClock:
    """The processor's clock under test: it moves only when the harness moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance_to(self, when: float) -> None:
        self.now = max(self.now, when)


class _StrictOutlet:
    """An outlet's codec that checks each output strictly before encoding it."""

    def __init__(self, port: PortCodec) -> None:
        self._port = port
        self.schema = port.codec.schema
        self.last_size = 0

    def encode(self, value: dict[str, Any]) -> bytes:
        return self._port.encode(value, what="an output")

    def decode(self, data: bytes) -> dict[str, Any]:
        value = self._port.codec.decode(data)
        self.last_size = self._port.codec.last_size
        return value


class Engine:
    """A processor (or source runner) and its in-memory broker, for one streamlet."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        descriptor: StreamletDescriptor,
        codecs: dict[str, PortCodec],
        batch_size: int,
        loop: asyncio.AbstractEventLoop,
        on_dead_letter: DeadLetterHook,
        app: str,
        name: str,
    ) -> None:
        self.codecs = codecs
        self.broker = MemoryBroker()
        self.consumer = MemoryConsumer(self.broker, group="testkit")
        # every delivery reported, as a source's producer is: it says what Kafka took
        failures = CountedOutputs()
        self.producer = MemoryProducer(self.broker, config=failures.producer_config())
        # The in-memory clients speak the part of confluent-kafka's API the runtime calls;
        # they are not subclasses (those would open librdkafka handles), hence the casts.
        self.delivery = AtLeastOnce(
            cast(Producer, self.producer), cast(Consumer, self.consumer), failures
        )
        self.clock = ManualClock()
        self._streamlet = streamlet
        self._descriptor = descriptor
        self._loop = loop
        self._stop = threading.Event()
        self.metrics = Metrics(app=app, streamlet=name, replica=0)
        self._health = HealthState()
        self.bindings = self._bind(descriptor, codecs)
        self._outlets_by_topic = {b.topic: b.outlet for b in self.bindings.outlets.values()}
        self._read = len(self.broker.log)
        self.control: ControlReader | None = None
        if self.bindings.controls_by_topic:
            self.control = ControlReader(
                consumer=cast(Consumer, MemoryConsumer(self.broker, group="testkit-control")),
                bindings=[
                    ControlInletBinding(inlet, topic, codec)
                    for topic, (inlet, codec) in self.bindings.controls_by_topic.items()
                ],
            )
            self.control.assign()
        self.state: StateManager | None = None
        self._state_dir: tempfile.TemporaryDirectory[str] | None = None
        if descriptor.stateful:
            # the runtime's own stores, over a changelog in the memory broker and a
            # directory of the test's: a store's whole life, restore included, is real
            self._state_dir = tempfile.TemporaryDirectory(prefix="streamflow-state-")
            self.state = StateManager(
                changelogs={
                    topic: (inlet, changelog_topic(app, name, inlet))
                    for topic, (inlet, _) in self.bindings.inlets_by_topic.items()
                },
                directory=Path(self._state_dir.name),
                reader=MemoryChangelog(self.broker),
            )
            streamlet.context.stores = self.state
        self.processor: Processor | None = None
        if descriptor.inlets or descriptor.control_inlets:
            self.processor = Processor(
                streamlet=streamlet,
                descriptor=descriptor,
                bindings=self.bindings,
                consumer=cast(Consumer, self.consumer),
                delivery=self.delivery,
                metrics=self.metrics,
                health=self._health,
                control=None,  # applied when a test sends control records, not per turn
                loop=loop,
                stop=self._stop,
                batch_size=batch_size,
                batch_timeout=0.0,
                clock=self.clock,
                on_dead_letter=on_dead_letter,
                state=self.state,
            )
            self.processor.start()
        self._source: SourceRunner | None = None

    @staticmethod
    def _bind(descriptor: StreamletDescriptor, codecs: dict[str, PortCodec]) -> Bindings:
        bindings = Bindings(dlq_topic=DLQ_TOPIC)
        for port in descriptor.inlets:
            bindings.inlets_by_topic[port.name] = (port.name, codecs[port.name].codec)
        for port in descriptor.control_inlets:
            bindings.controls_by_topic[port.name] = (port.name, codecs[port.name].codec)
        for port in descriptor.outlets:
            bindings.outlets[port.name] = OutletBinding(
                outlet=port.name,
                topic=outlet_topic(port.name),
                codec=_StrictOutlet(codecs[port.name]),
                schema_header=port.schema.encode(),
            )
        return bindings

    # -- driving ---------------------------------------------------------------

    def write(
        self,
        topic: str,
        data: bytes,
        key: str | None,
        schema: str,
        timestamp_ms: int,
        *,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Message:
        return self.broker.append(
            topic,
            data,
            key.encode() if key is not None else None,
            [(_SCHEMA_HEADER, schema.encode()), *(headers or [])],
            timestamp_ms=timestamp_ms,
        )

    def run(self, after_turn: Callable[[], None]) -> None:
        """Turn the processor until no record is left that it will take now."""
        assert self.processor is not None
        self.clock.advance_to(self.processor.backoff_until)  # retry what backed off
        while True:
            consumed = self.processor.turn()
            self.delivery.poll()
            after_turn()
            if not consumed:
                return

    def between_batches(self) -> None:
        assert self.processor is not None
        self.processor.between_batches()
        self.delivery.poll()

    def apply_control(self) -> None:
        """Apply every control record written so far, as a replica does between batches."""
        assert self.control is not None and self.processor is not None
        while self.control.poll(
            apply=self.processor.apply_control, reject=self.processor.reject_control
        ):
            pass
        self.delivery.poll()

    def emit_source_items(self, items: Callable[[], Any], limit: int) -> None:
        """Route ``limit`` items from ``items()`` (None: exhausted) through the source runner."""
        if self._source is None:
            self._source = SourceRunner(
                streamlet=self._streamlet,
                descriptor=self._descriptor,
                bindings=self.bindings,
                delivery=self.delivery,
                metrics=self.metrics,
                health=self._health,
                loop=self._loop,
                stop=self._stop,
            )
        self.delivery.begin_batch()
        try:
            for _ in range(limit):
                item = items()
                if item is EXHAUSTED:
                    break
                self._source.emit(item)
        finally:
            self.delivery.end_batch({})
            self.delivery.poll()

    def serve(self, scenario: Callable[[], Awaitable[T]], *, timeout: float) -> T:
        """Run ``serve(emitter)`` through the serve runner while ``scenario()`` runs beside it
        on the same loop; when the scenario ends, the runner stops ``serve`` as on SIGTERM."""
        stop = threading.Event()
        runner = ServeRunner(
            streamlet=self._streamlet,
            descriptor=self._descriptor,
            bindings=self.bindings,
            # its own producer, as in a replica: one that reports every delivery
            producer=cast(Producer, MemoryProducer(self.broker)),
            metrics=self.metrics,
            health=self._health,
            loop=self._loop,
            stop=stop,
        )

        async def drive() -> T:
            try:
                return await asyncio.wait_for(scenario(), timeout)
            finally:
                stop.set()

        task = self._loop.create_task(drive())
        runner.run()
        if not task.done():  # serve() returned by itself before the scenario ended
            self._loop.run_until_complete(task)
        return task.result()

    # -- reading ---------------------------------------------------------------

    @property
    def pending(self) -> int:
        return self.consumer.lag

    @property
    def backing_off(self) -> str | None:
        return self.processor.backing_off if self.processor is not None else None

    def new_outputs(self) -> list[RoutedOutput]:
        """What was written to the outlets since the last call, in the order written."""
        self.producer.flush()
        fresh, self._read = self.broker.log[self._read :], len(self.broker.log)
        out: list[RoutedOutput] = []
        for msg in fresh:
            outlet = self._outlets_by_topic.get(msg.topic() or "")
            if outlet is None:
                continue
            key = msg.key()
            headers = {
                name: value.decode() if isinstance(value, bytes) else str(value)
                for name, value in cast(list[tuple[str, Any]], msg.headers() or [])
                if name != _SCHEMA_HEADER
            }
            out.append(
                RoutedOutput(
                    outlet,
                    key.decode() if key is not None else None,
                    self.codecs[outlet].codec.decode(msg.value() or b""),
                    headers,
                )
            )
        return out

    def close(self) -> None:
        self._stop.set()
        self.delivery.close(0)
        if self.control is not None:
            self.control.close()
        if self.state is not None:
            self.state.close()
        if self._state_dir is not None:
            self._state_dir.cleanup()


#: What an ``items`` callable of :meth:`Engine.emit_source_items` returns when the source ends.
EXHAUSTED = object()
