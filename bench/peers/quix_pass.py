"""The Quix Streams competitor: ``app.dataframe(in).apply(...).to_topic(out)``.

It uses Quix's own ``AvroSerializer`` / ``AvroDeserializer`` (fastavro
``schemaless_writer`` / ``schemaless_reader`` underneath), subclassed only to strip
and write the 10-byte single-object header, so it reads the same input topic and
writes the same bytes as the other competitors. Quix has no single-object encoding
of its own; without a schema registry its Avro is plain schemaless Avro.

Delivery is Quix's default at-least-once: its checkpoint flushes the producer and
commits every ``commit_interval`` (5 s). The librdkafka settings that shape the
broker's work (acks, idempotence, linger, lz4) are set to the runtime's, so the
comparison measures the framework, not the batching.

The passthrough function counts records, which is how the driver learns when the
first record arrived and when the N-th was handed on: one Python call per record,
which is what ``apply`` costs anyway.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from quixstreams import Application
from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer
from quixstreams.models.serializers.base import SerializationContext

from bench import common

_HEADER_LEN = 10


class SingleObjectDeserializer(AvroDeserializer):
    """Quix's Avro deserializer behind the single-object header."""

    def __call__(self, value: bytes, ctx: SerializationContext) -> Any:
        return super().__call__(value[_HEADER_LEN:], ctx)


class SingleObjectSerializer(AvroSerializer):
    """Quix's Avro serializer, with the single-object header in front."""

    def __init__(self, schema: Any, header: bytes) -> None:
        super().__init__(schema)
        self._header = header

    def __call__(self, value: Any, ctx: SerializationContext) -> bytes:
        return self._header + super().__call__(value, ctx)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--bootstrap", "--input", "--output", "--group"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=500, help="ignored: Quix polls singly")
    args = parser.parse_args(argv)

    schema = json.loads(common.SCHEMA_FILE.read_text(encoding="utf-8"))
    _, header = common.load_schema()
    producer_settings = {
        k: v for k, v in common.PRODUCER_SETTINGS.items() if k in ("linger.ms", "compression.type")
    }
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        producer_extra_config=producer_settings,  # Quix sets acks=all and idempotence itself
        auto_create_topics=False,
        loglevel="WARNING",
        processing_guarantee="at-least-once",
    )
    source = app.topic(
        args.input, value_deserializer=SingleObjectDeserializer(schema), key_deserializer="bytes"
    )
    sink = app.topic(
        args.output, value_serializer=SingleObjectSerializer(schema, header), key_serializer="bytes"
    )
    seen = 0
    records = args.records

    def passthrough(value: dict[str, Any]) -> dict[str, Any]:
        nonlocal seen
        if seen == 0:
            common.report("first")
        seen += 1
        if seen == records:
            common.report("produced", records=seen)
        return value

    app.dataframe(source).apply(passthrough).to_topic(sink)
    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    app.run()  # until SIGTERM: Quix commits its checkpoint and closes


if __name__ == "__main__":
    main()
