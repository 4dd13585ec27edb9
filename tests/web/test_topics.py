"""The report-topic reader, with a fake consumer in place of Kafka."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streamflow.operator.web import snapshot, topics
from streamflow.schema import SchemaStore, SingleObjectCodec

STORE = SchemaStore()
TOPIC = "wine-drift"
AT = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
REPORT = {
    "detector": "drift",
    "source": "inputs",
    "window": {"index": 3, "records": 178, "start_time": AT, "end_time": AT, "offsets": []},
    "features": [],
    "drifted": True,
    "severity": "HIGH",
    "time": AT,
}


@dataclasses.dataclass
class Message:
    raw: bytes

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self.raw

    def key(self) -> bytes:
        return b"k"

    def headers(self) -> list[tuple[str, bytes]]:
        return [("streamflow-schema", snapshot.DRIFT_REPORT.encode())]

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 0

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class Meta:
    error = None
    partitions = {0: None}


class Listing:
    topics = {TOPIC: Meta()}


class OneRecord:
    """A topic holding one DriftReport; the first ``failures`` assignments fail."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.assigned: list[Any] = []
        codec = SingleObjectCodec(STORE.get(snapshot.DRIFT_REPORT), store=STORE)
        self.pending = [Message(codec.encode(REPORT))]

    def list_topics(self, topic: str, timeout: float) -> Listing:
        return Listing()

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return (0, 1)

    def assign(self, partitions: list[Any]) -> None:
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        self.assigned = partitions

    def assignment(self) -> list[Any]:
        return self.assigned

    def consume(self, n: int, timeout: float) -> list[Message]:
        found, self.pending = self.pending, []
        return found

    def position(self, partitions: list[Any]) -> list[Any]:
        return []


def _reader() -> topics.TopicReader:
    return topics.TopicReader(
        bootstrap="unused:9092",
        config={},
        topics={TOPIC: ("drift", snapshot.DRIFT_REPORT)},
        store=STORE,
    )


def test_a_failed_read_is_tried_again_though_the_topic_did_not_move() -> None:
    reader = _reader()
    kafka = OneRecord(failures=1)
    reader.poll(kafka)  # type: ignore[arg-type]
    assert reader.records().problem is not None and not reader.records().drift
    reader.poll(kafka)  # type: ignore[arg-type]
    records = reader.records()
    assert records.problem is None
    assert [r["severity"] for r in records.drift["drift"]] == ["HIGH"]


class NewTopic(OneRecord):
    """A report topic made moments ago: its first watermark requests find no leader yet."""

    def __init__(self, transient: int) -> None:
        super().__init__(failures=0)
        self.transient = transient

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        if self.transient:
            self.transient -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return (0, 1)


def test_a_topic_whose_leader_is_not_known_yet_is_read_without_a_problem_shown() -> None:
    reader = _reader()
    kafka = NewTopic(transient=2)
    reader.poll(kafka)  # type: ignore[arg-type]
    records = reader.records()
    assert records.problem is None
    assert [r["severity"] for r in records.drift["drift"]] == ["HIGH"]
    assert kafka.transient == 0


def test_a_watermark_error_that_is_not_transient_is_shown_at_once() -> None:
    reader = _reader()

    class Denied(OneRecord):
        def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    reader.poll(Denied(failures=0))  # type: ignore[arg-type]
    problem = reader.records().problem
    assert problem is not None and "cannot read the report topics" in problem
    assert "TOPIC_AUTHORIZATION_FAILED" in problem


def test_each_partition_keeps_its_own_newest_verdict() -> None:
    """A detector's windows are per input partition: partition 1's calm report after
    partition 0's drifted one does not make the application's verdict "no drift"."""
    reader = _reader()
    kafka = OneRecord(failures=0)
    codec = SingleObjectCodec(STORE.get(snapshot.DRIFT_REPORT), store=STORE)

    def report(partition: int, drifted: bool) -> Message:
        span = {"topic": "wine-features", "partition": partition, "first": 0, "last": 177}
        window = {**REPORT["window"], "offsets": [span]}  # type: ignore[dict-item]
        value = {**REPORT, "window": window, "drifted": drifted}
        return Message(codec.encode(value))

    kafka.pending = [report(0, True), report(1, False)]
    reader.poll(kafka)  # type: ignore[arg-type]
    drift = reader.records().drift["drift"]
    assert sorted(r["drifted"] for r in drift) == [False, True]
    latest = snapshot._latest_drift(reader.records())
    assert latest is not None and latest["verdict"] == "drift"
