"""Reading the report topics for the web view: drift verdicts, explanations, rollout
decisions, dead letters.

The verdicts and explanations are records on topics the application already
writes, so the web view reads the newest of them rather than asking any
replica. Which topics to read follows from the graph, not from class names:
every topic a port writes ``streamflow.ml.DriftReport`` or
``streamflow.ml.Explanation`` to. A :class:`TopicReader` reads them on its own
thread, a few seconds apart, with one consumer outside any group (partitions
assigned by hand, nothing committed), and only when a topic's end moved; a
page that asks many times a second costs Kafka nothing more. Dead letters are
read when someone asks for them (a click), from the end of the streamlet's
dead-letter topic, and their error headers returned; the records themselves
are not, since they may hold anything.

A report topic may be in any topic format: the reader decodes with the
application's codecs for it (:class:`streamflow.runtime.peek.Decoder`), the
schema being the one the graph says its producer writes.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streamflow.blueprint.graph import Graph
from streamflow.blueprint.model import Application
from streamflow.operator.web import rollouts, snapshot
from streamflow.runtime import peek
from streamflow.runtime.clients import watermarks
from streamflow.schema import SchemaStore

__all__ = ["DEAD_LETTER_HEADERS", "TopicReader", "dead_letters", "report_topics"]

DEAD_LETTER_HEADERS = {
    "streamflow-error": "error",
    "streamflow-error-type": "error_type",
    "streamflow-source-topic": "topic",
    "streamflow-source-partition": "partition",
    "streamflow-source-offset": "offset",
}
_PER_TOPIC = 40  # the newest records read per topic: every key (source, partition) of a detector


def report_topics(graph: Graph) -> dict[str, tuple[str, str]]:
    """``{topic: (producing streamlet, schema)}`` for the DriftReport, Explanation and
    RolloutDecision topics."""
    wanted = (snapshot.DRIFT_REPORT, snapshot.EXPLANATION, rollouts.DECISION)
    return {
        e.topic: (e.streamlet, e.schema)
        for e in graph.edges
        if e.direction == "produce" and e.schema in wanted
    }


def consumer(bootstrap: str, config: Mapping[str, Any]) -> Consumer:
    """A consumer that joins no group's rebalances and commits nothing."""
    return Consumer(
        {
            **config,
            "bootstrap.servers": bootstrap,
            "group.id": f"streamflow-web-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )


class TopicReader:
    """Keeps the newest DriftReports (one per key) and Explanation of each streamlet."""

    def __init__(
        self,
        *,
        bootstrap: str,
        config: Mapping[str, Any],
        topics: Mapping[str, tuple[str, str]],
        store: SchemaStore,
        app: Application | None = None,
        interval: float = 2.0,
    ) -> None:
        self.topics = dict(topics)
        self.interval = interval
        self._bootstrap, self._config = bootstrap, dict(config)
        schemas = {topic: schema for topic, (_, schema) in self.topics.items()}
        self._decoder = peek.Decoder(store, app=app, schemas=schemas)
        self._ends: dict[str, tuple[int, ...]] = {}
        self._drift: dict[str, dict[str, dict[str, Any]]] = {}
        self._explanations: dict[str, dict[str, Any]] = {}
        # a controller's decisions by (model, candidate, sequence): read again, kept once
        self._decisions: dict[str, dict[tuple[str, int, int], dict[str, Any]]] = {}
        self._problem: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamflow-web-topics", daemon=True)

    def start(self) -> None:
        if self.topics:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def records(self) -> snapshot.Records:
        with self._lock:
            return snapshot.Records(
                drift={s: list(by_key.values()) for s, by_key in self._drift.items()},
                explanations=dict(self._explanations),
                decisions={s: list(by_key.values()) for s, by_key in self._decisions.items()},
                problem=self._problem,
            )

    def poll(self, reader: Consumer) -> None:
        """Read every topic whose end moved (or whose last read failed) once, with ``reader``."""
        try:
            for topic in self.topics:
                self._read(reader, topic)
            self._set_problem(None)
        except (KafkaException, peek.PeekError) as exc:
            self._set_problem(f"cannot read the report topics: {exc}")

    def _run(self) -> None:
        try:
            reader = consumer(self._bootstrap, self._config)
        except KafkaException as exc:  # a setting librdkafka refuses
            self._set_problem(f"cannot read the report topics: {exc}")
            return
        try:
            while not self._stop.is_set():
                self.poll(reader)
                self._stop.wait(self.interval)
        finally:
            reader.close()

    def _read(self, reader: Consumer, topic: str) -> None:
        meta = reader.list_topics(topic, timeout=5).topics.get(topic)
        if meta is None or meta.error is not None:
            return  # not created yet: nothing was reported
        # asked again while the answer is transient: a report topic made moments ago says
        # "not leader for partition" at first, which is no problem to show on the page
        ends = tuple(
            watermarks(reader, TopicPartition(topic, p), timeout_s=5)[1]
            for p in sorted(meta.partitions)
        )
        if self._ends.get(topic) == ends:
            return
        streamlet, schema = self.topics[topic]
        for msg in peek.last(reader, topic, _PER_TOPIC, timeout=10):
            decoded = self._decoder.decode(msg)
            if decoded.error is None and isinstance(decoded.value, dict):
                self._keep(streamlet, schema, decoded.value)
        # only once read: a read that failed is tried again though the end did not move
        self._ends[topic] = ends

    def _keep(self, streamlet: str, schema: str, value: dict[str, Any]) -> None:
        with self._lock:
            if schema == snapshot.DRIFT_REPORT:
                # a detector's windows are per input partition: the newest report of each
                offsets = (value.get("window") or {}).get("offsets") or [{}]
                partition = offsets[0].get("partition", -1)
                key = f"{value.get('detector')}:{value.get('source')}:{partition}"
                self._drift.setdefault(streamlet, {})[key] = value
            elif schema == rollouts.DECISION:
                mine = self._decisions.setdefault(streamlet, {})
                mine[(value["model"], value["candidate_version"], value["sequence"])] = value
                for oldest in sorted(mine)[: max(0, len(mine) - _PER_TOPIC)]:
                    del mine[oldest]
            else:
                self._explanations[streamlet] = value

    def _set_problem(self, problem: str | None) -> None:
        with self._lock:
            self._problem = problem


def dead_letters(
    *, bootstrap: str, config: Mapping[str, Any], topic: str, n: int
) -> Sequence[dict[str, Any]]:
    """The newest ``n`` dead letters of ``topic``, newest first: their error headers and key."""
    reader = consumer(bootstrap, config)
    try:
        meta = reader.list_topics(topic, timeout=5).topics.get(topic)
        if meta is None or meta.error is not None:
            return []  # no dead letter was ever written
        found = peek.last(reader, topic, n, timeout=10)
    finally:
        reader.close()
    out = []
    for msg in reversed(found):
        headers = peek.headers(msg)
        key = msg.key()
        entry: dict[str, Any] = {
            name: headers.get(header, "") for header, name in DEAD_LETTER_HEADERS.items()
        }
        entry["key"] = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        entry["timestamp"] = msg.timestamp()[1] / 1000.0
        entry["dead_letter_offset"] = msg.offset()
        entry["dead_letter_partition"] = msg.partition()
        out.append(entry)
    return out
