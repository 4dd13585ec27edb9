"""The chaos suite's yardstick: its output reader outlives a stalled consumer of its own,
and does not mistake a transaction left open (the app's fault) for one.

Each test lets the reader read first under its usual patience, and only then makes it
impatient (half a second), so a slow first fetch on a loaded machine is not judged.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.chaos import traffic
from tests.runtime import support


def _send(bootstrap: str, topic: str, keys: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in keys:
        producer.produce(topic, b"v", f"r{n}".encode(), partition=n % 2)
    assert producer.flush(30) == 0


@pytest.fixture
def reader(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> Iterator[traffic.OutputReader]:
    out, dead = topic_factory("yard-out", partitions=2), topic_factory("yard-dead", partitions=2)
    reader = traffic.OutputReader(kafka_bootstrap, out, dead)
    yield reader
    if reader.is_alive():
        reader.stop()


def test_a_reader_whose_consumer_stopped_is_made_again_where_it_stood(
    kafka_bootstrap: str, reader: traffic.OutputReader
) -> None:
    _send(kafka_bootstrap, reader.out_topic, range(5))
    reader.start()
    support.wait_for(lambda: reader.distinct() == 5, timeout=30, message="the first 5 ids")
    reader.STALLED_AFTER_S = 0.5
    # what librdkafka's consumer does after some broker restarts: it fetches nothing more
    reader._consumer.pause(reader.partitions)
    _send(kafka_bootstrap, reader.out_topic, range(5, 10))
    support.wait_for(
        lambda: reader.distinct() == 10, timeout=60, message="the ids sent while it was stalled"
    )
    # at least once: the new consumer's own first fetch may outlast half a second
    assert reader.reopened, "the stalled consumer was made again"
    assert set(reader.out.values()) == {1}, "made again where it stood, not from the start"


def test_a_transaction_left_open_is_not_taken_for_a_stalled_reader(
    kafka_bootstrap: str, reader: traffic.OutputReader
) -> None:
    _send(kafka_bootstrap, reader.out_topic, range(3))
    open_one = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"yard-{reader.out_topic}"}
    )
    open_one.init_transactions(30)
    open_one.begin_transaction()
    open_one.produce(reader.out_topic, b"v", b"r3", partition=0)
    assert open_one.flush(30) == 0
    _send(kafka_bootstrap, reader.out_topic, range(4, 6))  # committed, but past the open one
    reader.start()
    support.wait_for(  # r0, r2 before the open transaction, r1 and r5 on the other partition
        lambda: reader.distinct() == 4 and reader.end.get((reader.out_topic, 0)) == 2,
        timeout=30,
        message="the committed ids before the open transaction",
    )
    reader.STALLED_AFTER_S = 0.5
    support.wait_for(lambda: reader.stall_checks >= 2, timeout=30, message="two idle checks")
    try:
        assert reader.reopened == []
        assert reader.distinct() < 6
        assert "r3" not in reader.out
        stands = traffic.where_outputs_stand(kafka_bootstrap, reader)
        assert f"'{reader.out_topic}[0]': 2" in stands  # the stable end, held at the open one
    finally:
        open_one.abort_transaction(30)


class _StallsOnce(traffic.PacedProducer):
    """Its first batch's records reach the log, but it takes them for stalled."""

    stalled = False

    def _flush(self, producer: Producer) -> bool:
        delivered = super()._flush(producer)
        if not self.stalled:
            self.stalled = True
            return False
        return delivered


def _keys(bootstrap: str, topic: str, isolation: str) -> Counter[str]:
    """Every record of ``topic`` (2 partitions) as a reader of ``isolation`` sees it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"yard-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
    keys: Counter[str] = Counter()
    at_end: set[int] = set()
    try:
        while len(at_end) < 2:
            for message in consumer.consume(100, 1.0):
                if message.error() is None:
                    keys[message.key().decode()] += 1
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
    finally:
        consumer.close()
    return keys


def test_a_stalled_input_producer_is_made_again_and_writes_no_id_twice(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("yard-in", partitions=2)
    records = [(f"r{n}", b"v") for n in range(20)]
    producer = _StallsOnce(kafka_bootstrap, topic, records, rate=100.0)  # batches of 10
    producer.start()
    support.wait_for(producer.done.is_set, timeout=60, message="the producer to finish")
    assert producer.failed == []
    assert producer.remade == 1
    assert producer.acked == {key for key, _ in records}
    written = _keys(kafka_bootstrap, topic, "read_uncommitted")
    assert sorted(n for n in written.values()) == [1] * 10 + [2] * 10  # the stalled batch twice
    assert _keys(kafka_bootstrap, topic, "read_committed") == Counter(producer.acked)
    # the offset past each partition's last record, short of its end: the commit marker
    ends = traffic.high_watermarks(
        kafka_bootstrap, [TopicPartition(topic, p) for p in (0, 1)], isolation="read_uncommitted"
    )
    assert producer.ends and all(producer.ends[tp] < ends[tp] for tp in producer.ends)
