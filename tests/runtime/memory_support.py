"""A processor wired to Kafka in memory, for the runtime's unit tests.

The hot path's rules (offsets wait for acknowledgements, dead letters keep a
batch flowing, a batch that backs off is retried whole) are pinned down here
one behaviour at a time, without a broker and without sleeping: the clients
are :mod:`streamflow.runtime.inmemory`'s, the clock is a number a test moves.
Ports carry JSON, so a test writes and reads plain dicts; a value that is not
JSON does not decode, and an output with a field its schema lacks does not
encode.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, Message, Producer

from streamflow import Inlet, Outlet, Record, Streamlet
from streamflow.api.descriptor import describe
from streamflow.runtime.delivery import (
    AtLeastOnce,
    CallWatchdog,
    Delivery,
    FailedOutputs,
)
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
from streamflow.runtime.state.manager import StateManager
from streamflow.runtime.transactions import ExactlyOnce
from streamflow.schema.codecs import DecodeError, EncodeError
from streamflow.schema.store import Schema, SchemaStore

__all__ = [
    "CHANGELOG",
    "DLQ",
    "GROUP",
    "IN",
    "OUT",
    "Copy",
    "Gated",
    "JsonCodec",
    "ManualClock",
    "Rig",
    "bindings",
    "headers_of",
    "rig",
]

IN, OUT, DLQ, GROUP = "in", "out", "dead-letters", "group"
CHANGELOG = "app.unit.in.changelog"
_STORE = SchemaStore([Path(__file__).parent / "schemas"])
_READING, _SCALED = "tests.runtime.Reading", "tests.runtime.Scaled"


class JsonCodec:
    """A port's codec: JSON objects, and only the fields the schema declares."""

    def __init__(self, schema: str) -> None:
        self.schema: Schema = _STORE.get(schema)
        self.last_size = 0  # what a batch adds up against its limit (len-based here)

    def encode(self, value: dict[str, Any]) -> bytes:
        unknown = sorted(set(value) - set(self.schema.field_names()))
        if unknown:
            raise EncodeError(f"{self.schema.name} has no field {unknown[0]!r}")
        return json.dumps(value, sort_keys=True).encode()

    def decode(self, data: bytes) -> dict[str, Any]:
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise DecodeError(f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise DecodeError("not a JSON object")
        self.last_size = len(data)
        return value


class ManualClock:
    """The processor's clock: it moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Copy(Streamlet):
    """Copies each reading's id; ``poison`` raises, ``bogus`` makes an output that won't encode."""

    inp = Inlet("in", _READING)
    out = Outlet("out", _SCALED)

    def process(self, record: Record) -> dict[str, Any]:
        value = record.value
        if value.get("poison"):
            raise ValueError(f"poison record {value['id']}")
        if value.get("bogus"):
            return {"id": value["id"], "bogus": 1}
        return {"id": value["id"]}


class Gated(Copy):
    """A Copy that takes data only once ``ready`` (a first model loaded, say); notes the ids
    it processed in ``seen``."""

    ready = False

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def accepts_data(self) -> bool:
        return self.ready

    def process(self, record: Record) -> dict[str, Any]:
        self.seen.add(record.value["id"])
        return super().process(record)


def bindings(*, inp: str = IN, out: str = OUT, dlq: str = DLQ) -> Bindings:
    """The ports of a one-inlet, one-outlet streamlet, on the topics ``in`` and ``out``
    (or those given: a broker test's own)."""
    return Bindings(
        inlets_by_topic={inp: ("in", JsonCodec(_READING))},
        outlets={
            "out": OutletBinding(
                outlet="out", topic=out, codec=JsonCodec(_SCALED), schema_header=_SCALED.encode()
            )
        },
        dlq_topic=dlq,
    )


@dataclass
class Rig:
    """A started processor and everything around it that a test reads or moves."""

    broker: MemoryBroker
    consumer: MemoryConsumer
    producer: MemoryProducer
    delivery: Delivery
    processor: Processor
    clock: ManualClock
    #: (record key, kind, error type) of each dead letter, as the hook was told
    dead: list[tuple[str, str, str]] = field(default_factory=list)

    def write(self, *values: dict[str, Any]) -> None:
        """Records on ``in``, each keyed by its ``id``."""
        for value in values:
            self.broker.append(IN, json.dumps(value).encode(), str(value["id"]).encode())

    def write_raw(self, key: str, data: bytes) -> None:
        self.broker.append(IN, data, key.encode())

    def outputs(self) -> list[str]:
        """The ids written to ``out`` (and acknowledged), in order."""
        return [json.loads(m.value() or b"")["id"] for m in self.broker.records(OUT)]

    def dead_letters(self) -> dict[str, dict[str, bytes]]:
        """Each dead letter's headers, by the key of its record."""
        return {(m.key() or b"").decode(): headers_of(m) for m in self.broker.records(DLQ)}

    def stored(self) -> int | None:
        return self.consumer.stored.get((IN, 0))

    def committed(self) -> int | None:
        return self.broker.committed.get(GROUP, {}).get((IN, 0))


def _never_exits(code: int) -> None:
    raise AssertionError(f"the call watchdog would have ended the replica ({code})")


def headers_of(msg: Message) -> dict[str, bytes]:
    return dict(cast(list[tuple[str, bytes]], msg.headers() or []))


def rig(
    streamlet: Streamlet,
    loop: asyncio.AbstractEventLoop,
    *,
    exactly_once: bool = False,
    batch_size: int = 100,
    queue_limit: int = 100_000,
    partitions: int = 1,
    broker: MemoryBroker | None = None,
    state_dir: Path | None = None,
    lineage: bool = True,
) -> Rig:
    """A processor for ``streamlet`` over a fresh broker (or ``broker``: a restart),
    subscribed and ready to turn; a stateful streamlet keeps its stores in ``state_dir``;
    ``lineage`` as a blueprint's ``lineage`` sets it."""
    broker = broker or MemoryBroker()
    broker.create_topic(IN, partitions)
    consumer = MemoryConsumer(broker, group=GROUP)
    failures = FailedOutputs()
    producer = MemoryProducer(broker, queue_limit=queue_limit, config=failures.producer_config())
    # Not subclasses of confluent-kafka's clients (those would open librdkafka handles).
    as_consumer, as_producer = cast(Consumer, consumer), cast(Producer, producer)
    delivery: Delivery = (
        ExactlyOnce(as_producer, as_consumer, watchdog=CallWatchdog(exit=_never_exits))
        if exactly_once
        else AtLeastOnce(as_producer, as_consumer, failures)
    )
    clock = ManualClock()
    dead: list[tuple[str, str, str]] = []
    state = None
    if state_dir is not None:
        broker.create_topic(CHANGELOG, partitions)
        state = StateManager(
            changelogs={IN: ("in", CHANGELOG)},
            directory=state_dir,
            reader=MemoryChangelog(broker),
        )
        streamlet.context.stores = state
    processor = Processor(
        streamlet=streamlet,
        descriptor=describe(type(streamlet)),
        bindings=bindings(),
        consumer=as_consumer,
        delivery=delivery,
        metrics=Metrics(app="app", streamlet="unit", replica=0),
        health=HealthState(),
        control=None,
        loop=loop,
        stop=threading.Event(),
        batch_size=batch_size,
        batch_timeout=0.0,
        clock=clock,
        on_dead_letter=lambda msg, inlet, error, kind: dead.append(
            ((msg.key() or b"").decode(), kind, type(error).__name__)
        ),
        state=state,
        lineage=lineage,
    )
    processor.start()
    return Rig(broker, consumer, producer, delivery, processor, clock, dead)
