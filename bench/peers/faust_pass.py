"""The faust-streaming competitor: an agent that forwards each record to a topic.

Faust has no Avro support of its own, so the value codec is a custom
``faust.Codec`` over fastavro: skip the 10-byte single-object header and
``schemaless_reader`` on the way in, write the header and ``schemaless_writer`` on
the way out, the same work as every other competitor. Keys are raw bytes and pass
through unchanged.

Faust runs on aiokafka (pure-Python protocol on asyncio), not librdkafka; its
producer is set to the runtime's acks=all, lz4 and 5 ms linger. Offsets are
committed by faust's own at-least-once machinery (every ``broker_commit_interval``,
2.8 s by default), for records whose agent step has finished.
"""

from __future__ import annotations

import argparse
import logging
import sys
from io import BytesIO
from typing import Any

import faust
from fastavro import schemaless_reader, schemaless_writer
from faust.serializers import codecs

from bench import common

_HEADER_LEN = 10
CODEC = "sf-avro"


class SingleObjectAvro(codecs.Codec):
    """Avro single-object encoding with fastavro: the codec faust lacks."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.parsed, self.header = common.load_schema()

    def _loads(self, s: bytes) -> Any:
        source = BytesIO(s)
        source.seek(_HEADER_LEN)
        return schemaless_reader(source, self.parsed, None)

    def _dumps(self, obj: Any) -> bytes:
        sink = BytesIO()
        sink.write(self.header)
        schemaless_writer(sink, self.parsed, obj)
        return sink.getvalue()


def build(args: argparse.Namespace) -> faust.App:
    """The app, its two topics and the forwarding agent."""
    codecs.register(CODEC, SingleObjectAvro())
    app = faust.App(
        args.group,
        broker=f"kafka://{args.bootstrap}",
        store="memory://",
        web_enabled=False,
        topic_partitions=common.PARTITIONS,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_compression_type="lz4",
        producer_linger=0.005,
    )
    source = app.topic(args.input, key_serializer="raw", value_serializer=CODEC)
    sink = app.topic(args.output, key_serializer="raw", value_serializer=CODEC)
    seen = 0
    records = args.records

    @app.agent(source)
    async def forward(stream: Any) -> None:
        nonlocal seen
        async for key, value in stream.items():
            if seen == 0:
                common.report("first")
            await sink.send(key=key, value=value)
            seen += 1
            if seen == records:
                common.report("produced", records=seen)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--bootstrap", "--input", "--output", "--group"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=500, help="ignored: faust streams")
    args = parser.parse_args(argv)
    app = build(args)
    logging.getLogger("faust").setLevel(logging.WARNING)
    # The report lines go to stdout, which faust would otherwise route into its log.
    worker = faust.Worker(app, loglevel="WARNING", quiet=True, redirect_stdouts=False)
    # At WARNING faust's worker keeps a terminal spinner that it drives by setting the root
    # logger to DEBUG, so every log.debug in aiokafka builds a LogRecord (8% of the CPU in
    # a py-spy profile). No deployment wants that, so the spinner goes.
    worker.spinner = None
    sys.argv = sys.argv[:1]  # the worker parses no command line of ours
    worker.execute_from_commandline()  # until SIGTERM; faust commits and stops


if __name__ == "__main__":
    main()
