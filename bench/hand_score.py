"""The hand-written batch scorer that ``streamflow score`` is measured against.

pyarrow reads the Parquet file, fastavro writes each row in the single-object
encoding, confluent-kafka produces it to the input topic flat out; a consumer
reads the output topic from where it ended at the start until as many records
are back as were sent, and the results go to Parquet in the order they arrived.
It is what a script needs when it owns the topics: no run id, no dead letters,
no bound on the rows in flight, no resume, no progress.
"""

from __future__ import annotations

import argparse
from io import BytesIO
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, Producer, TopicPartition

from bench import common


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--into", required=True)
    parser.add_argument("--from", dest="source", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    parsed, header = common.load_schema()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": "hand-score",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    meta = consumer.list_topics(args.source, timeout=30).topics[args.source]
    consumer.assign(
        [
            TopicPartition(
                args.source,
                p,
                consumer.get_watermark_offsets(TopicPartition(args.source, p), timeout=30)[1],
            )
            for p in meta.partitions
        ]
    )
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, **common.PRODUCER_SETTINGS, "linger.ms": 5}
    )
    sent = 0
    for batch in pq.ParquetFile(args.input).iter_batches(batch_size=8192):
        for row in batch.to_pylist():
            sink = BytesIO()
            sink.write(header)
            fastavro.schemaless_writer(sink, parsed, row)
            while True:
                try:
                    producer.produce(args.into, sink.getvalue(), None, headers=common.SCHEMA_HEADER)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            sent += 1
    producer.flush(60)
    results: list[Any] = []
    while len(results) < sent:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                source = BytesIO(msg.value())  # type: ignore[arg-type]
                source.seek(len(header))
                results.append(fastavro.schemaless_reader(source, parsed, None))
    consumer.close()
    pq.write_table(pa.Table.from_pylist(results), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
