"""The runtime's own CPU per record against the hand-written loop's, in one process.

``python -m bench.hotpath [--size 100] [--batch 500] [--rounds 9] [--records 100000]``

The passthrough scenario measures throughput through a broker, on a machine the
broker shares: its ratios move by 10-15% between rounds. This one takes the
broker out. It builds the same batches of real ``confluent_kafka.Message``
objects (single-object Avro values of ``--size`` bytes, a key, the
``streamflow-schema`` header) and hands each batch, in turn, to

* ``Processor.process_batch`` of a :class:`bench.streamlets.PassBatch` replica
  (at-least-once delivery), which is what a replica's loop does with a batch; and
* the hand-written loop's own per-batch code (``bench.handwritten``'s Avro step);

both producing into a producer that never connects, so ``produce`` queues and
nothing is sent. Each runs under its own process's garbage-collector policy: the
runtime's (a replica freezes what start-up made and raises the first threshold
before its loop, ``runtime/replica.py``) and Python's defaults for the hand loop,
as in the passthrough scenario. It reports the CPU time of the calling thread per record (the
best of the rounds, and the median), and their ratio. Then it times the pieces
on their own, so the difference can be read: what the runtime does that the
hand loop does not (the fingerprint and trailing-bytes checks of the decode, a
``Record`` per input, the lineage headers of every input), and what both do.

Messages built in Python hold their headers as a list already; read from a
broker, ``headers()`` first converts librdkafka's, so the lineage row is the
least this costs. Nothing here touches a broker or the network.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import threading
import time
from collections.abc import Callable
from io import BytesIO
from types import SimpleNamespace
from typing import cast

from confluent_kafka import Consumer, Message, Producer
from fastavro import schemaless_reader, schemaless_writer

from bench import common, handwritten, streamlets
from streamflow.api.descriptor import describe
from streamflow.api.streamlet import Record
from streamflow.runtime import replica
from streamflow.runtime.delivery import AtLeastOnce, FailedOutputs
from streamflow.runtime.health import HealthState
from streamflow.runtime.lineage import carried
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings, OutletBinding
from streamflow.runtime.processor import Processor
from streamflow.schema import SchemaStore, SingleObjectCodec

_GC_DEFAULTS = gc.get_threshold()
_IN, _OUT = "in", "out"
_SCHEMA = "bench.PassRecord"
_HEADERS = [("streamflow-schema", _SCHEMA.encode())]
# Nothing listens on the discard port: the producers queue and never send.
_OFFLINE = {
    "bootstrap.servers": "127.0.0.1:9",
    "queue.buffering.max.messages": 10_000_000,
    "queue.buffering.max.kbytes": 8_000_000,
    "log_level": 0,
}


def _codec() -> SingleObjectCodec:
    store = SchemaStore([common.SCHEMA_FILE.parent])
    return SingleObjectCodec(store.get(_SCHEMA), store=store)


def _values(codec: SingleObjectCodec, size: int, batch: int) -> list[bytes]:
    """A batch's encoded values, each ``size`` bytes (or just over)."""
    length = common.payload_length(common.Wire(common.AVRO, topic=_IN, registry=None), size)
    return [codec.encode(common.make_record(i, b"x" * length)) for i in range(batch)]


def _messages(values: list[bytes], start: int) -> list[Message]:
    """One batch as a consumer hands it over: fresh messages, their headers not read yet."""
    return [
        Message(
            topic=_IN,
            partition=0,
            offset=start + i,
            key=f"k{i}".encode(),
            value=value,
            headers=list(_HEADERS),
        )
        for i, value in enumerate(values)
    ]


def _streamflow(
    codec: SingleObjectCodec, batch: int
) -> tuple[Callable[[list[Message]], None], Producer]:
    failures = FailedOutputs()
    producer = Producer({**common.PRODUCER_SETTINGS, **failures.producer_config()} | _OFFLINE)
    processor = Processor(
        streamlet=streamlets.PassBatch(),
        descriptor=describe(streamlets.PassBatch),
        bindings=Bindings(
            inlets_by_topic={_IN: ("in", codec)},
            outlets={
                "out": OutletBinding(
                    outlet="out", topic=_OUT, codec=codec, schema_header=_SCHEMA.encode()
                )
            },
            dlq_topic="dead-letters",
        ),
        consumer=cast(Consumer, None),  # a batch is handed over: nothing is consumed
        delivery=AtLeastOnce(producer, None, failures, store_interval_s=1e9),
        metrics=Metrics(app="bench", streamlet="hotpath", replica=0),
        health=HealthState(),
        control=None,
        loop=asyncio.new_event_loop(),
        stop=threading.Event(),
        batch_size=batch,
        batch_timeout=0.0,
        lineage=False,  # as the passthrough's sf-batch: the hand loop copies no lineage either
    )
    return processor.process_batch, producer


def _hand(codec: SingleObjectCodec) -> tuple[Callable[[list[Message]], None], Producer]:
    producer = Producer({**common.PRODUCER_SETTINGS, "delivery.report.only.error": True} | _OFFLINE)
    loop = SimpleNamespace(
        producer=producer,
        parsed=codec.schema.parsed,
        header=codec.header,
        args=SimpleNamespace(output=_OUT),
        pending={},
    )
    avro = handwritten.Passthrough._avro
    return (lambda messages: avro(cast(handwritten.Passthrough, loop), messages)), producer


def _per_record(step: Callable[[list[Message]], None], values: list[bytes], records: int) -> float:
    """CPU microseconds per record of this thread in ``step``, for ``records`` records.

    Each batch is made just before its step, as a consumer makes it, so the heap holds
    one batch at a time (as a replica's does) and the garbage collector sees what it
    sees there; making it is not timed.
    """
    spent = 0.0
    for start in range(0, records, len(values)):
        messages = _messages(values, start)
        started = time.thread_time()
        step(messages)
        spent += time.thread_time() - started
    return spent / records * 1e6


def compare(size: int, batch: int, rounds: int, records: int) -> dict[str, list[float]]:
    """Per-record CPU of both loops, alternating which goes first, ``rounds`` times."""
    codec = _codec()
    values = _values(codec, size, batch)
    seen: dict[str, list[float]] = {"streamflow": [], "hand": []}
    for round_ in range(rounds):
        order = ("streamflow", "hand") if round_ % 2 == 0 else ("hand", "streamflow")
        for name in order:
            if name == "streamflow":
                step, producer = _streamflow(codec, batch)
                replica._tune_gc()  # what a replica does before its loop starts
            else:
                step, producer = _hand(codec)
                gc.unfreeze()  # the hand loop runs with Python's defaults
                gc.set_threshold(*_GC_DEFAULTS)
            seen[name].append(_per_record(step, values, records))
            producer.purge()
            producer.flush(0)
    gc.unfreeze()
    gc.set_threshold(*_GC_DEFAULTS)
    return seen


def pieces(size: int, batch: int, rounds: int) -> dict[str, float]:
    """Nanoseconds per record of each piece on its own (the best of ``rounds``)."""
    codec = _codec()
    parsed, header = codec.schema.parsed, codec.header
    encoded = _values(codec, size, batch)
    messages = _messages(encoded, 0)
    values = [codec.decode(data) for data in encoded]
    producer = Producer({**common.PRODUCER_SETTINGS, "delivery.report.only.error": True} | _OFFLINE)
    consumed = Record.consumed

    def hand_decode() -> None:
        for m in messages:
            source = BytesIO(m.value())  # type: ignore[arg-type]
            source.seek(len(header))
            schemaless_reader(source, parsed, None)

    def sf_decode() -> None:
        for m in messages:
            codec.decode(m.value())  # type: ignore[arg-type]

    def records() -> None:
        [consumed(m, v, "in", _IN, 0) for m, v in zip(messages, values, strict=True)]

    fresh: list[list[Message]] = [[]]  # made anew each round: a message converts its headers once

    def lineage() -> None:
        for m in fresh[0]:
            found = m.headers()
            if found is not None and len(found) > 1:
                carried(found)

    def hand_encode() -> None:
        for v in values:
            sink = BytesIO()
            sink.write(header)
            schemaless_writer(sink, parsed, v)
            sink.getvalue()

    def sf_encode() -> None:
        for v in values:
            codec.encode(v)

    def produce() -> None:
        for m in messages:
            producer.produce(_OUT, m.value(), m.key(), headers=_HEADERS)

    steps = {
        "decode, hand (BytesIO, skip the header, schemaless_reader)": hand_decode,
        "decode, streamflow (+ fingerprint and trailing-bytes checks)": sf_decode,
        "a Record per input (streamflow only)": records,
        "lineage headers of each input (streamflow only)": lineage,
        "encode, hand": hand_encode,
        "encode, streamflow": sf_encode,
        "produce with the schema header (both)": produce,
    }
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        fresh[0] = _messages(encoded, 0)
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            best[name] = min(best[name], (time.perf_counter() - started) / batch * 1e9)
        producer.purge()
        producer.flush(0)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100, help="bytes per encoded record")
    parser.add_argument("--batch", type=int, default=500, help="records per batch")
    parser.add_argument("--rounds", type=int, default=9, help="alternated rounds per loop")
    parser.add_argument("--records", type=int, default=100_000, help="records per round")
    args = parser.parse_args(argv)
    seen = compare(args.size, args.batch, args.rounds, args.records)
    best = {name: min(values) for name, values in seen.items()}
    middle = {name: statistics.median(values) for name, values in seen.items()}
    print(
        f"{args.size} B records, batches of {args.batch}, {args.rounds} rounds of {args.records:,}"
    )
    print()
    print("| loop | CPU us / record, best | median | all rounds |")
    print("|---|---:|---:|---|")
    for name, values in seen.items():
        rounds = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {name} | {best[name]:.2f} | {middle[name]:.2f} | {rounds} |")
    print()
    ratio = best["streamflow"] / best["hand"]
    print(
        f"CPU per record, streamflow / hand: {ratio:.3f} (best), "
        f"{middle['streamflow'] / middle['hand']:.3f} (median)"
    )
    print()
    print("| piece | ns / record |")
    print("|---|---:|")
    for name, ns in pieces(args.size, args.batch, max(args.rounds * 3, 10)).items():
        print(f"| {name} | {ns:.0f} |")


if __name__ == "__main__":
    main()
