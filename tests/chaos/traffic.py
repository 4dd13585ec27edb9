"""The chaos harness's traffic: a paced producer of distinct ids, a reader of the
outputs, and what the harness asks Kafka about a run (committed lag, ends).

The producer and the reader talk to the broker directly, never through a fault:
they are the yardstick, not the subject.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient


class PacedProducer(threading.Thread):
    """Sends ``records`` at ``rate`` a second, idempotently, straight to the broker."""

    def __init__(self, bootstrap: str, topic: str, records: list[tuple[str, bytes]], rate: float):
        super().__init__(name="chaos-producer", daemon=True)
        self._records, self._rate, self._topic = records, rate, topic
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                # the input outlives any fault of the suite: it is the yardstick, not the subject
                "message.timeout.ms": 600_000,
            }
        )
        self.sent = 0
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self.done = threading.Event()
        self._halt = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        for index, (key, value) in enumerate(self._records):
            if self._halt.is_set():
                break
            ahead = started + index / self._rate - time.monotonic()
            if ahead > 0.005:  # pacing, in ticks of a few ms
                time.sleep(ahead)
            while True:
                try:
                    self._producer.produce(
                        self._topic, value, key.encode(), on_delivery=self._report
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self.sent = index + 1
            self._producer.poll(0)
        while len(self._producer) and not self._halt.is_set():
            self._producer.flush(1.0)
        self.done.set()

    def stop(self) -> None:
        self._halt.set()

    def _report(self, err: KafkaError | None, msg: object) -> None:
        key = msg.key().decode()  # type: ignore[attr-defined]
        if err is None:
            self.acked.add(key)
        else:
            self.failed.append(f"{key}: {err.str()}")


class OutputReader(threading.Thread):
    """Reads the output and dead-letter topics from the start, ``read_committed``,
    counting records per id and noting when each id was first seen."""

    def __init__(self, bootstrap: str, out_topic: str, dead_topic: str) -> None:
        super().__init__(name="chaos-reader", daemon=True)
        self.out_topic, self.dead_topic = out_topic, dead_topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"chaos-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        self.partitions = [
            TopicPartition(name, partition, OFFSET_BEGINNING)
            for name in (out_topic, dead_topic)
            for partition in self._consumer.list_topics(name, timeout=30).topics[name].partitions
        ]
        self._consumer.assign(self.partitions)
        self.lock = threading.Lock()
        self.out: Counter[str] = Counter()
        self.dead: Counter[str] = Counter()
        self.first_seen: dict[str, float] = {}
        self.arrivals: list[float] = []  # when each batch with outputs in it was read
        self.end: dict[tuple[str, int], int] = {}  # the offset of each partition's last EOF
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self._read(self._consumer.consume(1000, 0.2))
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def _read(self, messages: list[object]) -> None:
        now = time.monotonic()
        with self.lock:
            got_output = False
            for message in messages:
                error = message.error()  # type: ignore[attr-defined]
                topic, partition = message.topic(), message.partition()  # type: ignore[attr-defined]
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self.end[(topic, partition)] = message.offset()  # type: ignore[attr-defined]
                    continue
                key = message.key().decode()  # type: ignore[attr-defined]
                (self.out if topic == self.out_topic else self.dead)[key] += 1
                self.first_seen.setdefault(key, now)
                got_output = True
            if got_output:
                self.arrivals.append(now)

    def distinct(self) -> int:
        with self.lock:
            return len(self.first_seen)

    def first_output_after(self, moment: float) -> float | None:
        with self.lock:
            return next((t for t in self.arrivals if t >= moment), None)

    def at_end(self, high: dict[tuple[str, int], int]) -> bool:
        with self.lock:
            return all(self.end.get(tp, -1) >= offset for tp, offset in high.items())


def group_lag(bootstrap: str, group: str, topic: str) -> int:
    """Records of ``topic`` not yet committed by consumer group ``group``; -1: unknown yet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        lag = 0
        for position in committed:
            _, high = consumer.get_watermark_offsets(position, timeout=10, cached=False)
            lag += high - max(position.offset, 0)
        return lag
    except Exception:  # the broker is still coming back: not settled yet
        return -1
    finally:
        consumer.close()


def high_watermarks(
    bootstrap: str, partitions: list[TopicPartition], *, isolation: str = "read_committed"
) -> dict[tuple[str, int], int]:
    """Each partition's end as a reader of ``isolation`` (librdkafka's default,
    ``read_committed``, sees the last stable offset) finds it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-{uuid.uuid4().hex}",
            "isolation.level": isolation,
        }
    )
    try:
        return {
            (tp.topic, tp.partition): consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=10, cached=False
            )[1]
            for tp in partitions
        }
    finally:
        consumer.close()


def where_outputs_stand(bootstrap: str, reader: OutputReader) -> str:
    """Each output partition's end as a plain reader and a ``read_committed`` one see it
    (a last stable offset held below the end is a transaction left open), and where the
    reader stopped: what a scenario whose outputs stopped coming says, to tell the two
    apart."""
    ends: dict[str, object] = {}
    for isolation in ("read_uncommitted", "read_committed"):
        try:
            found = high_watermarks(bootstrap, reader.partitions, isolation=isolation)
            ends[isolation] = {f"{t}[{p}]": o for (t, p), o in found.items()}
        except Exception as exc:  # a diagnostic: say why it has none
            ends[isolation] = {"error": str(exc)}
    with reader.lock:
        stopped = {f"{t}[{p}]": o for (t, p), o in reader.end.items()}
    return (
        f"outputs end at {ends['read_uncommitted']}, stable (read_committed) at "
        f"{ends['read_committed']}; the reader's last end of partition at {stopped}"
    )


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Delete a scenario's topics, so the shared broker stays small (and restarts fast)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(names, operation_timeout=30).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)
