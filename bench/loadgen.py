"""The latency scenario's two outside processes: a paced ingress producer and an egress probe.

``python -m bench.loadgen produce --rate R --seconds S ...`` writes ``bench.TimedRecord``
records at R records/s (0: as fast as it can), each stamped with the wall-clock time
in microseconds at which it was handed to ``produce()``. Pacing is open-loop: every
turn produces whatever is due by the clock since the start, so a slow broker makes
the producer catch up in bursts instead of quietly lowering the rate.

``python -m bench.loadgen probe --out FILE ...`` reads the output topic from its
current end, and for every record keeps (sent, received) in microseconds; on SIGTERM
it writes them to FILE as int64 arrays, with a third: when the broker appended each
output record, where the output topic stamps its records with the broker's clock
(``message.timestamp.type=LogAppendTime``; -1 where it does not). That splits each
latency in two: before the output reached the broker (ingress, the processor's consume
and work, its produce) and after (its commit, the visibility of a transaction to a
``read_committed`` reader, the probe's fetch). Every 0.25 s it reports how many it has
seen, which is how the driver measures the maximum rate and knows when a step has
drained. Both processes share the machine's wall clock, so no clock sync is involved.

Both write and read in the topics' format (``--format``: ``avro``, the default,
``avro-registry`` with ``--registry URL``, or ``json``), as a client outside
streamflow would (:class:`bench.common.Wire`), so a processor on topics of any
format can be measured.

Neither imports streamflow: the load and the measurement must not share its code paths.
Against a secured Kafka both take librdkafka settings as ``-X key=value`` (repeatable,
like kcat) and from ``STREAMFLOW_KAFKA_<KEY>`` variables, the way streamflow's own
clients do, so a password need not be on the command line.
"""

from __future__ import annotations

import argparse
import array
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

from bench import common
from streamflow.runtime.clients import config_from_env

SCHEMA_FILE = common.SCHEMA_DIR / "TimedRecord.avsc"
HEADERS: list[tuple[str, str | bytes | None]] = [("streamflow-schema", b"bench.TimedRecord")]
_TICK_S = 0.25


def _wire(args: argparse.Namespace) -> common.Wire:
    """How records look on ``--topic``: its format (the registry id is looked up once)."""
    return common.Wire(args.format, topic=args.topic, registry=args.registry, path=SCHEMA_FILE)


def client_config(args: argparse.Namespace) -> dict[str, Any]:
    """bootstrap, then ``STREAMFLOW_KAFKA_*`` from the environment, then ``-X`` settings."""
    # read as a replica reads them: STREAMFLOW_KAFKA_LIB (the devkit's jars) and the
    # registry's credentials are not librdkafka settings
    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap, **config_from_env(os.environ)}
    for setting in args.kafka:
        key, sep, value = setting.partition("=")
        if not sep:
            raise SystemExit(f"-X {setting!r}: expected key=value")
        config[key.strip()] = value
    return config


def produce(args: argparse.Namespace) -> None:
    """Produce at ``rate`` for ``seconds``, then flush and report what was sent when."""
    encode = _wire(args).encode
    payload = random.Random(0).randbytes(max(0, args.size - 40))
    # An upstream application's producer: librdkafka's default linger (5 ms), whatever
    # the runtime's own producer is tuned to, so a runtime setting cannot move it.
    producer = Producer({**client_config(args), **common.PRODUCER_SETTINGS, "linger.ms": 5})
    rate, sent = float(args.rate), 0
    start = time.monotonic()
    start_us = time.time_ns() // 1000
    end = start + args.seconds
    while (now := time.monotonic()) < end:
        due = int((now - start) * rate) if rate > 0 else sent + 1000
        while sent < due:
            value = {"id": f"{args.tag}-{sent}", "sent_us": time.time_ns() // 1000}
            data = encode(value | {"payload": payload})
            try:
                producer.produce(args.topic, data, None, headers=HEADERS)
            except BufferError:
                producer.poll(0.01)  # the broker is behind: retry this record
                continue
            sent += 1
        producer.poll(0)
        if rate > 0:
            time.sleep(max(0.0, min(0.001, start + (sent + 1) / rate - time.monotonic())))
    end_us = time.time_ns() // 1000
    if producer.flush(60):
        raise SystemExit("produce: records were not acknowledged within 60 s")
    common.report("done", records=sent, start_us=start_us, end_us=end_us, start_t=start, end_t=now)


class _Probe:
    """The egress consumer; SIGTERM makes ``run`` write its arrays and return."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = False
        self.sent = array.array("q")
        self.received = array.array("q")
        self.appended = array.array("q")

    def stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self) -> None:
        decode = _wire(self.args).decode
        consumer = Consumer(
            {
                **client_config(self.args),
                "group.id": f"probe-{self.args.topic}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",  # exactly-once outputs count when committed
                "fetch.wait.max.ms": 10,
            }
        )
        meta = consumer.list_topics(self.args.topic, timeout=10).topics[self.args.topic]
        ends = [
            TopicPartition(
                self.args.topic,
                p,
                consumer.get_watermark_offsets(TopicPartition(self.args.topic, p), timeout=10)[1],
            )
            for p in meta.partitions
        ]
        consumer.assign(ends)
        common.report("ready")
        next_tick = time.monotonic()
        sent, received, appended = self.sent, self.received, self.appended
        while not self.stopping:
            # Never wait for a full batch: take what is there, else block for one record,
            # or the probe's own batching would add up to its timeout to every latency.
            messages = consumer.consume(1000, 0) or consumer.consume(1, 0.05)
            now_us = time.time_ns() // 1000
            for msg in messages:
                if msg.error() is not None:
                    continue
                sent.append(decode(msg.value())["sent_us"])  # type: ignore[arg-type]
                received.append(now_us)
                kind, stamp_ms = msg.timestamp()
                appended.append(stamp_ms * 1000 if kind == TIMESTAMP_LOG_APPEND_TIME else -1)
            if time.monotonic() >= next_tick:
                common.report("tick", count=len(received))
                next_tick += _TICK_S
        consumer.close()
        with Path(self.args.out).open("wb") as out:
            array.array("q", [len(sent)]).tofile(out)
            sent.tofile(out)
            received.tofile(out)
            appended.tofile(out)
        common.report("done", count=len(received))


Probed = tuple["array.array[int]", "array.array[int]", "array.array[int]"]


def read_probe(path: Path) -> Probed:
    """(sent_us, received_us, appended_us) as the probe wrote them."""
    with path.open("rb") as source:
        head = array.array("q")
        head.fromfile(source, 1)
        arrays = array.array("q"), array.array("q"), array.array("q")
        for values in arrays:
            values.fromfile(source, head[0])
    return arrays


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--rate", type=float, required=True, help="records/s; 0 for flat out")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--size", type=int, default=100, help="encoded record size, about")
    p.add_argument("--tag", default="r", help="prefix of the record ids")
    q = sub.add_parser("probe")
    q.add_argument("--bootstrap", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--out", required=True)
    for sub_parser in (p, q):
        sub_parser.add_argument("--format", default=common.AVRO, choices=common.FORMATS)
        sub_parser.add_argument("--registry", help="the schema registry's URL (avro-registry)")
        sub_parser.add_argument(
            "-X",
            dest="kafka",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a librdkafka setting, e.g. security.protocol=SASL_SSL (repeatable)",
        )
    args = parser.parse_args(argv)
    if args.command == "produce":
        produce(args)
        return
    probe = _Probe(args)
    signal.signal(signal.SIGTERM, probe.stop)
    signal.signal(signal.SIGINT, probe.stop)
    probe.run()


if __name__ == "__main__":
    main()
