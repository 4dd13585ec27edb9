"""The hand-written competitor: a lean confluent-kafka + fastavro passthrough loop.

It does the same work per record as a streamflow passthrough processor, and no more:

1. ``consume(batch_size, 0.1)`` a batch;
2. decode: skip the 10-byte single-object header, ``schemaless_reader`` the body;
3. encode: header + ``schemaless_writer`` into a fresh buffer;
4. ``produce`` to the output topic with the input's key and the ``streamflow-schema``
   header (so the bytes on the wire match streamflow's), retrying on a full queue;
5. ``poll(0)`` once per batch to serve delivery reports.

Delivery: at-least-once by *flush then store*. Offsets of consumed batches are kept
in memory; every ``--flush-every`` batches (and at shutdown) the producer is flushed,
so every output so far is acknowledged, and only then are those offsets stored;
librdkafka's auto-commit (every 1 s) commits what is stored. No per-record Python
callback runs: delivery reports are enabled only for errors
(``delivery.report.only.error``), and an error ends the process without storing.
The price is one flush stall every ``flush-every`` batches, which is cheap at 20.

It reports (see :mod:`bench.common`) when the first batch arrives and when the
batch holding the ``--records``-th input has been handed to the producer.
"""

from __future__ import annotations

import argparse
import signal
import sys
from io import BytesIO
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from fastavro import schemaless_reader, schemaless_writer

from bench import common

_HEADER_LEN = 10


class _Failed(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--flush-every", type=int, default=20)
    args = parser.parse_args(argv)

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err.str())

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": f"{args.group}.0",
            **common.CONSUMER_SETTINGS,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": f"{args.group}.0",
            **common.PRODUCER_SETTINGS,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
        }
    )
    parsed, header = common.load_schema()
    headers = common.SCHEMA_HEADER
    output = args.output
    pending: dict[tuple[Any, Any], int] = {}
    batches = 0
    seen = 0

    def flush_and_store() -> None:
        producer.flush()
        if errors:
            raise _Failed(f"an output was not delivered: {errors[0]}")
        if pending:
            consumer.store_offsets(
                offsets=[TopicPartition(t, p, o) for (t, p), o in pending.items()]
            )
            pending.clear()

    consumer.subscribe([args.input])
    try:
        while not stopping:
            messages = consumer.consume(args.batch_size, 0.1)
            producer.poll(0)
            if not messages:
                continue
            if seen == 0:
                common.report("first")
            for msg in messages:
                if msg.error() is not None:
                    continue
                source = BytesIO(msg.value())  # type: ignore[arg-type]  # errors skipped
                source.seek(_HEADER_LEN)
                value: Any = schemaless_reader(source, parsed, None)
                sink = BytesIO()
                sink.write(header)
                schemaless_writer(sink, parsed, value)
                _produce(producer, output, sink.getvalue(), msg.key(), headers)
                pending[(msg.topic(), msg.partition())] = msg.offset() + 1  # type: ignore[operator]
            producer.poll(0)
            before, seen = seen, seen + len(messages)
            if before < args.records <= seen:
                common.report("produced", records=seen)
            batches += 1
            if batches % args.flush_every == 0:
                flush_and_store()
        flush_and_store()
        _commit(consumer)
    except _Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
    return 0


def _commit(consumer: Consumer) -> None:
    """A final synchronous commit; "nothing to commit" is fine (auto-commit got there)."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def _produce(producer: Producer, topic: str, value: bytes, key: bytes | None, headers: Any) -> None:
    while True:
        try:
            producer.produce(topic, value, key, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


if __name__ == "__main__":
    sys.exit(main())
