"""The web view's report reader on a report topic that is not single-object Avro.

A JSON report carries no fingerprint and may carry no schema header (another
client, or a replica of an older streamflow, wrote it); the reader decodes it
with the codec of the topic's format and the schema the graph gives the topic,
never loading the producer's class. A fake consumer stands in for Kafka.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from streamflow.blueprint.model import Application
from streamflow.operator.web import snapshot, topics
from streamflow.schema import SchemaStore
from streamflow.schema.codecs import JsonTopicCodec

STORE = SchemaStore()
TOPIC = "wine-drift"
REPORT = {
    "detector": "drift",
    "source": "inputs",
    "window": {
        "index": 3,
        "records": 178,
        "start_time": "2025-01-01T00:00:00+00:00",
        "end_time": "2025-01-01T00:00:00+00:00",
        "offsets": [],
    },
    "features": [],
    "drifted": True,
    "severity": "HIGH",
    "time": "2025-01-01T00:00:00+00:00",
}


@dataclasses.dataclass
class Message:
    raw: bytes

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self.raw

    def topic(self) -> str:
        return TOPIC

    def key(self) -> bytes:
        return b"k"

    def headers(self) -> list[tuple[str, bytes]]:
        return []  # no streamflow-schema header: a client other than streamflow wrote it

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


class JsonTopic:
    """A topic holding one DriftReport as plain JSON."""

    def __init__(self) -> None:
        self.assigned: list[Any] = []
        self.pending = [Message(json.dumps(REPORT).encode())]

    def list_topics(self, topic: str, timeout: float) -> Listing:
        return Listing()

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return (0, 1)

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = partitions

    def assignment(self) -> list[Any]:
        return self.assigned

    def consume(self, n: int, timeout: float) -> list[Message]:
        found, self.pending = self.pending, []
        return found

    def position(self, partitions: list[Any]) -> list[Any]:
        return []


def app(fmt: str) -> Application:
    return Application.from_dict(
        {
            "name": "wine",
            # never imported: the reader has the topic's schema from the graph
            "streamlets": {"drift": {"class": "not_importable_here:Drift"}},
            "topics": {TOPIC: {"producers": ["drift.report"], "format": fmt}},
        }
    )


def read(application: Application | None) -> snapshot.Records:
    reader = topics.TopicReader(
        bootstrap="unused:9092",
        config={},
        topics={TOPIC: ("drift", snapshot.DRIFT_REPORT)},
        store=STORE,
        app=application,
    )
    reader.poll(JsonTopic())  # type: ignore[arg-type]
    return reader.records()


def test_a_json_report_topic_is_read_with_the_topics_codec() -> None:
    records = read(app("json"))
    assert records.problem is None
    [report] = records.drift["drift"]
    expected = JsonTopicCodec(STORE.get(snapshot.DRIFT_REPORT)).decode(json.dumps(REPORT).encode())
    assert report == expected and report["severity"] == "HIGH"


def test_without_the_app_a_json_report_is_not_mistaken_for_avro() -> None:
    records = read(None)
    assert records.problem is None and not records.drift
