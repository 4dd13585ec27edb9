"""The hand-written competitor: a lean confluent-kafka + fastavro passthrough loop.

It does the same work per record as a streamflow passthrough processor, and no more:

1. ``consume(batch_size, 0.1)`` a batch;
2. decode: skip the 10-byte single-object header, ``schemaless_reader`` the body;
3. encode: header + ``schemaless_writer`` into a fresh buffer;
4. ``produce`` to the output topic with the input's key and the ``streamflow-schema``
   header (so the bytes on the wire match streamflow's), retrying on a full queue;
5. ``poll(0)`` once per turn of the loop to serve (error-only) delivery reports.

Delivery: at-least-once by *flush then store*. Offsets of consumed batches are kept
in memory; every ``--flush-every`` batches (and at shutdown) the producer is flushed,
so every output so far is acknowledged, and only then are those offsets stored;
librdkafka's auto-commit (every 1 s) commits what is stored. No per-record Python
callback runs: delivery reports are enabled only for errors
(``delivery.report.only.error``), and an error ends the process without storing.
The price is one flush stall every ``flush-every`` batches, which is cheap at 20.

``--guarantee exactly-once``: what streamflow's exactly-once does, by hand. The
producer is transactional (``transactional.id``, the runtime's 10 s transaction
timeout). A batch joins the open transaction (``begin_transaction`` when none is)
and its outputs are produced; the transaction commits (``send_offsets_to_transaction``
with the offsets so far, ``commit_transaction``) after a batch that is not full, after
``--commit-interval`` (0.1 s, the runtime's ``ExactlyOnce.commit_interval_s``) from its
first batch, or when a consume finds nothing. So under load full batches share a
transaction, as in the runtime; ``--commit-interval 0`` commits every batch. The
consumer reads ``read_committed`` and never commits by itself (``enable.auto.commit``
false): its offsets move only inside a transaction.

It reports (see :mod:`bench.common`) when the first batch arrives and when the
batch holding the ``--records``-th input has been handed to the producer.

``--format`` is the topics' format, and the loop does what a streamflow codec
of that format does per record, written directly against fastavro and the
standard library (never streamflow's classes, so no shared code hides a cost):

* ``avro-registry``: check byte 0, look the 4-byte schema id up in a dict (the
  writer schema is fetched from the registry once per id), read the Avro body;
  write the 5-byte header of our own id (registered once, at start) and the body.
  confluent-kafka's ``AvroSerializer``/``AvroDeserializer`` do the same framing,
  but also run a subject-name strategy, schema-cache lookups, a schema expansion
  and a rules-engine pass per record (about 5x this loop's codec work, see
  bench/README.md): the cost of that library, not of the format, so the lean
  loop is the fairer floor for "what the format costs";
* ``json``: ``json.loads``, base64 bytes back to bytes, and a fastavro validation
  of the record against the schema (streamflow checks what it reads and writes on
  a JSON topic, so the loop does too); on the way out, validate and ``json.dumps``.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import time
from io import BytesIO
from pathlib import Path
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
from fastavro.validation import validate

from bench import common

_HEADER_LEN = 10
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"


class _Failed(Exception):
    """An output was not delivered; no offset past it may be stored."""


class Passthrough:
    """The loop, its clients and its bookkeeping; ``run`` until SIGTERM or SIGINT."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = False
        self.errors: list[str] = []
        client = {"bootstrap.servers": args.bootstrap, "client.id": f"{args.group}.0"}
        self.transactional = args.guarantee == EXACTLY_ONCE
        consumer = {**client, "group.id": args.group, **common.CONSUMER_SETTINGS}
        producer = {
            **client,
            **common.PRODUCER_SETTINGS,
            # Successful deliveries cost no Python call; failures land in on_delivery.
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
        }
        if self.transactional:
            consumer |= {"enable.auto.commit": False, "isolation.level": "read_committed"}
            producer |= {"transactional.id": args.group, "transaction.timeout.ms": 10_000}
        self.consumer = Consumer(consumer)
        self.producer = Producer(producer)
        if self.transactional:
            self.producer.init_transactions(60)
        wire = common.Wire(
            args.format, topic=args.output, registry=args.registry, path=Path(args.schema)
        )
        self.parsed, self.header = wire.parsed, wire.header
        self.writers: dict[bytes, Any] = {}  # avro-registry: schema id bytes -> writer schema
        self.convert = {
            common.AVRO: self._avro,
            common.AVRO_REGISTRY: self._registry,
            common.JSON: self._json,
        }[args.format]
        if args.bytes_only:
            self.convert = self._bytes
        self.pending: dict[tuple[Any, Any], int] = {}  # (topic, partition) -> next offset
        self.seen = self.batches = 0
        self.transactions = 0  # committed
        self.opened: float | None = None  # when the open transaction began

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(err.str())

    def stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self) -> None:
        self.consumer.subscribe([self.args.input])
        batches = 0
        try:
            while not self.stopping:
                messages = self.consumer.consume(self.args.batch_size, 0.1)
                if self.transactional:
                    if messages:
                        self.transaction(messages)
                    elif self.opened is not None:  # nothing more is queued
                        self.commit()
                elif messages:
                    self.passthrough(messages)
                    batches += 1
                    if batches % self.args.flush_every == 0:
                        self.flush_and_store()
                self.producer.poll(0)
            if not self.transactional:
                self.flush_and_store()
                _commit(self.consumer)
            elif self.opened is not None:
                self.commit()
        finally:
            self.consumer.close()

    def passthrough(self, messages: list[Message]) -> None:
        """Decode, re-encode and produce one batch; remember its offsets."""
        if self.seen == 0:
            common.report("first")
        self.convert(messages)
        before, self.seen, self.batches = self.seen, self.seen + len(messages), self.batches + 1
        if before < self.args.records <= self.seen:
            common.report(
                "produced", records=self.seen, batches=self.batches, transactions=self.transactions
            )

    def transaction(self, messages: list[Message]) -> None:
        """A batch in the open transaction; a batch that is not full, or one past the
        commit interval, commits it (full batches mean more is queued)."""
        if self.opened is None:
            self.producer.begin_transaction()
            self.opened = time.monotonic()
        self.passthrough(messages)
        if (
            len(messages) < self.args.batch_size
            or time.monotonic() - self.opened >= self.args.commit_interval
        ):
            self.commit()

    def commit(self) -> None:
        """The open transaction's outputs and its offsets commit together."""
        offsets = [TopicPartition(t, p, o) for (t, p), o in self.pending.items()]
        self.pending.clear()
        self.producer.send_offsets_to_transaction(
            offsets, self.consumer.consumer_group_metadata(), 30
        )
        self.producer.commit_transaction(60)  # raises when an output was not delivered
        self.opened = None
        self.transactions += 1

    def _avro(self, messages: list[Message]) -> None:
        producer, parsed, header = self.producer, self.parsed, self.header
        output, headers, pending = self.args.output, common.SCHEMA_HEADER, self.pending
        for msg in messages:
            if msg.error() is not None:
                continue
            source = BytesIO(msg.value())  # type: ignore[arg-type]  # no tombstones here
            source.seek(_HEADER_LEN)
            value: Any = schemaless_reader(source, parsed, None)
            sink = BytesIO()
            sink.write(header)
            schemaless_writer(sink, parsed, value)
            _produce(producer, output, sink.getvalue(), msg.key(), headers)
            pending[(msg.topic(), msg.partition())] = msg.offset() + 1  # type: ignore[operator]

    def _bytes(self, messages: list[Message]) -> None:
        """``--bytes-only``: each value forwarded as it came, neither decoded nor encoded."""
        producer, output, pending = self.producer, self.args.output, self.pending
        headers = common.SCHEMA_HEADER  # as the other loops write it
        for msg in messages:
            if msg.error() is not None:
                continue
            _produce(producer, output, msg.value(), msg.key(), headers)  # type: ignore[arg-type]
            pending[(msg.topic(), msg.partition())] = msg.offset() + 1  # type: ignore[operator]

    def _registry(self, messages: list[Message]) -> None:
        producer, parsed, header, writers = self.producer, self.parsed, self.header, self.writers
        output, headers, pending = self.args.output, common.SCHEMA_HEADER, self.pending
        for msg in messages:
            if msg.error() is not None:
                continue
            data: bytes = msg.value()  # type: ignore[assignment]  # no tombstones here
            if data[0] != 0:
                raise _Failed(f"not in the registry wire format: {data[:5].hex(' ')}")
            schema_id = data[1:5]
            writer = writers.get(schema_id)
            if writer is None:
                writer = writers[schema_id] = common.registry_schema(
                    self.args.registry, int.from_bytes(schema_id, "big")
                )
            source = BytesIO(data)
            source.seek(5)
            value: Any = schemaless_reader(source, writer, None)
            sink = BytesIO()
            sink.write(header)
            schemaless_writer(sink, parsed, value)
            _produce(producer, output, sink.getvalue(), msg.key(), headers)
            pending[(msg.topic(), msg.partition())] = msg.offset() + 1  # type: ignore[operator]

    def _json(self, messages: list[Message]) -> None:
        producer, parsed = self.producer, self.parsed
        output, headers, pending = self.args.output, common.SCHEMA_HEADER, self.pending
        loads, dumps, b64decode, default = (
            json.loads,
            json.dumps,
            base64.b64decode,
            common.json_default,
        )
        for msg in messages:
            if msg.error() is not None:
                continue
            value: Any = loads(msg.value())  # type: ignore[arg-type]  # no tombstones here
            value["payload"] = b64decode(value["payload"])
            if not validate(value, parsed, raise_errors=False):
                raise _Failed(f"not a valid record: {value!r:.200}")
            if not validate(value, parsed, raise_errors=False):  # what is written is checked
                raise _Failed(f"not a valid record to write: {value!r:.200}")
            encoded = dumps(value, default=default, separators=(",", ":")).encode()
            _produce(producer, output, encoded, msg.key(), headers)
            pending[(msg.topic(), msg.partition())] = msg.offset() + 1  # type: ignore[operator]

    def flush_and_store(self) -> None:
        """Every output so far is acknowledged once flush returns: only then store offsets."""
        self.producer.flush()
        if self.errors:
            raise _Failed(f"an output was not delivered: {self.errors[0]}")
        if self.pending:
            self.consumer.store_offsets(
                offsets=[TopicPartition(t, p, o) for (t, p), o in self.pending.items()]
            )
            self.pending.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--flush-every", type=int, default=20)
    parser.add_argument(
        "--commit-interval",
        type=float,
        default=0.1,
        help="exactly-once: how long full batches share a transaction (0: one per batch)",
    )
    parser.add_argument("--guarantee", default=AT_LEAST_ONCE, choices=(AT_LEAST_ONCE, EXACTLY_ONCE))
    parser.add_argument("--format", default=common.AVRO, choices=common.FORMATS)
    parser.add_argument("--registry", help="the schema registry's URL (avro-registry)")
    parser.add_argument(
        "--bytes-only",
        action="store_true",
        help="forward each value's bytes unchanged: librdkafka's own consume-and-produce, with "
        "one Python call a record (the limit a passthrough in Python can reach)",
    )
    parser.add_argument(
        "--schema",
        default=str(common.SCHEMA_FILE),
        help="the records' Avro schema (.avsc); the latency scenario's are bench.TimedRecord",
    )
    loop = Passthrough(parser.parse_args(argv))
    signal.signal(signal.SIGTERM, loop.stop)
    signal.signal(signal.SIGINT, loop.stop)
    try:
        loop.run()
    except _Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
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
