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

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient


class PacedProducer(threading.Thread):
    """Sends ``records`` at ``rate`` a second straight to the broker, a tenth of a second's
    records per transaction.

    After a graceful broker restart librdkafka's idempotent producer can lose its way
    ("new leader not found in cache") and never send again. The producer is the
    yardstick, not the subject: when a batch's records are not all delivered within
    `STALLED_AFTER_S`, it makes its producer again under the same transactional id. That
    fences the stalled one, the broker aborts what it left open, and the batch is sent
    again, so no id is committed twice. Once every record of a batch is delivered, its
    commit is only retried, since the broker may have committed it already; only a
    commit the broker says must be aborted is aborted and sent again.
    ``remade`` counts the producers made again (the table shows it); ``ends`` is the
    offset past each partition's last committed record (the commit marker after it is
    never handed to a consumer, so a caught-up group commits up to there).
    """

    STALLED_AFTER_S = 30.0
    COMMIT_PATIENCE_S = 300.0
    BATCH_S = 0.1
    MAX_TRIES = 5  # sending a batch whose records come back with errors

    def __init__(self, bootstrap: str, topic: str, records: list[tuple[str, bytes]], rate: float):
        super().__init__(name="chaos-producer", daemon=True)
        self._records, self._rate, self._topic = records, rate, topic
        self._config = {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"chaos-in-{uuid.uuid4().hex}",
            "linger.ms": 5,
            # the input outlives any fault of the suite: it is the yardstick, not the subject
            "message.timeout.ms": 600_000,
            "transaction.timeout.ms": 600_000,
        }
        self._generation = 0
        self._producer = self._make()
        self.sent = 0
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self.ends: dict[tuple[str, int], int] = {}
        self.remade = 0
        self.done = threading.Event()
        self._halt = threading.Event()
        self._batch: dict[str, tuple[int, int]] = {}  # key -> (partition, offset) delivered
        self._errors: list[str] = []
        self._tries = 0

    def _make(self) -> Producer:
        producer = Producer(self._config)
        deadline = time.monotonic() + self.COMMIT_PATIENCE_S
        while True:
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException as exc:  # the broker is coming back: ask again
                if time.monotonic() > deadline or exc.args[0].fatal():
                    raise
                time.sleep(0.5)  # a retry's pause, not a synchronisation

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # the yardstick failed: the harness asserts on it
            self.failed.append(f"the input producer gave up: {exc!r}")
        finally:
            self.done.set()

    def _run(self) -> None:
        started = time.monotonic()
        per_batch = max(1, int(self._rate * self.BATCH_S))
        first = 0
        while first < len(self._records) and not self._halt.is_set():
            batch = self._records[first : first + per_batch]
            if self._send(batch, first, started):
                first += len(batch)

    def _send(self, batch: list[tuple[str, bytes]], first: int, started: float) -> bool:
        """One transaction of ``batch``; whether it was committed (else it is sent again)."""
        self._batch, self._errors = {}, []
        producer, generation = self._producer, self._generation
        producer.begin_transaction()
        for index, (key, value) in enumerate(batch, start=first):
            ahead = started + index / self._rate - time.monotonic()
            if ahead > 0.005:  # pacing, in ticks of a few ms
                time.sleep(ahead)
            while True:
                try:
                    producer.produce(
                        self._topic,
                        value,
                        key.encode(),
                        on_delivery=lambda err, msg, g=generation: self._report(g, err, msg),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            self.sent = max(self.sent, index + 1)
            producer.poll(0)
        if not self._flush(producer) or self._errors:
            if self._halt.is_set():
                return False
            if self._errors:
                self._tries += 1
                if self._tries > self.MAX_TRIES:  # not a stall: an error that stays
                    raise RuntimeError(f"{self._tries - 1} tries, lastly: {self._errors[:3]}")
            self._remake()  # fences this producer: the broker aborts its transaction
            return False
        self._tries = 0
        if not self._commit(producer):
            return False  # aborted: nothing of it is committed, so it is sent again
        for key, (partition, offset) in self._batch.items():
            self.acked.add(key)
            where = (self._topic, partition)
            self.ends[where] = max(self.ends.get(where, 0), offset + 1)
        return True

    def _flush(self, producer: Producer) -> bool:
        """Whether every record of the batch was delivered within `STALLED_AFTER_S`."""
        deadline = time.monotonic() + self.STALLED_AFTER_S
        while len(producer) and time.monotonic() < deadline and not self._halt.is_set():
            producer.flush(0.5)
        return not len(producer)

    def _commit(self, producer: Producer) -> bool:
        """Commit the batch's transaction: True once committed, False once aborted."""
        deadline = time.monotonic() + self.COMMIT_PATIENCE_S
        while True:
            try:
                producer.commit_transaction(30)
                return True
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():  # the broker will not commit it: abort it
                    producer.abort_transaction(60)
                    return False
                # otherwise not retriable: the broker may hold the batch committed or not;
                # saying so fails the run, sending it again could write its ids twice
                if not error.retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # a retry's pause, not a synchronisation

    def _remake(self) -> None:
        old = self._producer
        self._generation += 1  # what the old producer still reports is ignored
        with contextlib.suppress(Exception):
            old.purge()
            old.poll(0)
        self._producer = self._make()
        self.remade += 1

    def stop(self) -> None:
        self._halt.set()

    def _report(self, generation: int, err: KafkaError | None, msg: object) -> None:
        if generation != self._generation:
            return
        key = msg.key().decode()  # type: ignore[attr-defined]
        if err is None:
            self._batch[key] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
        else:
            self._errors.append(f"{key}: {err.str()}")


class OutputReader(threading.Thread):
    """Reads the output and dead-letter topics from the start, ``read_committed``,
    counting records per id and noting when each id was first seen.

    An assigned librdkafka consumer can stop fetching for good after a broker restart
    while the broker holds committed records past where it stands, until it is made
    again (confluentinc/librdkafka#5153). The reader is the yardstick, not the subject:
    when it has read nothing for `STALLED_AFTER_S` although Kafka's last stable offset is
    past where it stands, it makes its consumer again at the offsets it reached, and
    says so in `reopened` (the table shows it). A transaction left open is not that:
    it holds the last stable offset where the reader stands, and the run still fails.
    """

    STALLED_AFTER_S = 30.0

    def __init__(self, bootstrap: str, out_topic: str, dead_topic: str) -> None:
        super().__init__(name="chaos-reader", daemon=True)
        self.bootstrap = bootstrap
        self.out_topic, self.dead_topic = out_topic, dead_topic
        self._consumer = self._make_consumer()
        self.partitions = [
            TopicPartition(name, partition, OFFSET_BEGINNING)
            for name in (out_topic, dead_topic)
            for partition in self._consumer.list_topics(name, timeout=30).topics[name].partitions
        ]
        self._consumer.assign(self.partitions)
        self.position: dict[tuple[str, int], int] = {}  # the next offset of each partition
        self.reopened: list[str] = []  # where the reader stood each time it was made again
        self.stall_checks = 0  # times it found itself idle and asked Kafka whether it is behind
        self._moved = 0.0  # when it last moved on; set when it starts reading
        self.lock = threading.Lock()
        self.out: Counter[str] = Counter()
        self.dead: Counter[str] = Counter()
        self.first_seen: dict[str, float] = {}
        self.arrivals: list[float] = []  # when each batch with outputs in it was read
        self.end: dict[tuple[str, int], int] = {}  # the offset of each partition's last EOF
        self._halt = threading.Event()

    def _make_consumer(self) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"chaos-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )

    def run(self) -> None:
        self._moved = time.monotonic()
        try:
            while not self._halt.is_set():
                if self._read(self._consumer.consume(1000, 0.2)):
                    self._moved = time.monotonic()
                elif time.monotonic() - self._moved > self.STALLED_AFTER_S:
                    self._moved = time.monotonic()
                    if behind := self._behind():
                        self._reopen(behind)
        finally:
            self._consumer.close()

    def _behind(self) -> dict[str, tuple[int, int]]:
        """The partitions whose last stable offset is past where the reader stands."""
        self.stall_checks += 1
        try:
            stable = high_watermarks(self.bootstrap, self.partitions)
        except Exception:  # the broker is not back yet: ask again after the next wait
            return {}
        with self.lock:
            return {
                f"{topic}[{partition}]": (self.position.get((topic, partition), 0), end)
                for (topic, partition), end in stable.items()
                if end > self.position.get((topic, partition), 0)
            }

    def _reopen(self, behind: dict[str, tuple[int, int]]) -> None:
        with contextlib.suppress(Exception):
            self._consumer.close()
        self._consumer = self._make_consumer()
        with self.lock:
            self._consumer.assign(
                [
                    TopicPartition(
                        tp.topic,
                        tp.partition,
                        self.position.get((tp.topic, tp.partition), OFFSET_BEGINNING),
                    )
                    for tp in self.partitions
                ]
            )
            where = ", ".join(f"{tp} at {at} of {end}" for tp, (at, end) in behind.items())
            self.reopened.append(where)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def _read(self, messages: list[object]) -> bool:
        """Count what was read; whether the reader moved on (a record or a new end)."""
        now = time.monotonic()
        with self.lock:
            got_output = False
            before = dict(self.position)
            for message in messages:
                error = message.error()  # type: ignore[attr-defined]
                topic, partition = message.topic(), message.partition()  # type: ignore[attr-defined]
                offset = message.offset()  # type: ignore[attr-defined]
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self.end[(topic, partition)] = offset
                        self.position[(topic, partition)] = offset
                    continue
                self.position[(topic, partition)] = offset + 1
                key = message.key().decode()  # type: ignore[attr-defined]
                (self.out if topic == self.out_topic else self.dead)[key] += 1
                self.first_seen.setdefault(key, now)
                got_output = True
            if got_output:
                self.arrivals.append(now)
            return self.position != before

    def distinct(self) -> int:
        with self.lock:
            return len(self.first_seen)

    def first_output_after(self, moment: float) -> float | None:
        with self.lock:
            return next((t for t in self.arrivals if t >= moment), None)

    def at_end(self, high: dict[tuple[str, int], int]) -> bool:
        with self.lock:
            return all(self.end.get(tp, -1) >= offset for tp, offset in high.items())


def group_lag(
    bootstrap: str, group: str, topic: str, ends: dict[tuple[str, int], int] | None = None
) -> int:
    """Records of ``topic`` not yet committed by consumer group ``group``; -1: unknown yet.

    Counted up to each partition's high watermark, or up to ``ends`` where the topic was
    written in transactions (the commit marker at its end is never committed past).
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        lag = 0
        for position in committed:
            if ends is None:
                _, end = consumer.get_watermark_offsets(position, timeout=10, cached=False)
            else:
                end = ends.get((topic, position.partition), 0)
            lag += max(end - max(position.offset, 0), 0)
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
        reopened = list(reader.reopened)
    return (
        f"outputs end at {ends['read_uncommitted']}, stable (read_committed) at "
        f"{ends['read_committed']}; the reader's last end of partition at {stopped}; "
        f"the reader was made again {len(reopened)}x: {reopened}"
    )


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Delete a scenario's topics, so the shared broker stays small (and restarts fast)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(names, operation_timeout=30).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)
