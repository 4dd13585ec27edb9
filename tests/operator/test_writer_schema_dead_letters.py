"""Dead letters a new writer schema caused: counted by the replica, read back, said once.

The replica's metrics count them per (port, subject, version, schema id) with an
info series that says why; ``status`` and the web view read that text back, sum
it over replicas, and put it in one sentence. These are the pure parts; the
whole path, against the real broker and registry, is
``tests/cli/test_status_writer_schemas.py``.
"""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streamflow.blueprint.graph import Edge, Graph, StreamletNode, TopicNode
from streamflow.cli import deploy_views
from streamflow.operator import targets
from streamflow.operator.targets import writer_schemas as writers
from streamflow.operator.web import scrape, snapshot
from streamflow.runtime import writer_schemas as counted
from streamflow.runtime.metrics import Metrics
from streamflow.schema.registry import UnreadableWriter

SUBJECT = "wine-features-value"
PROLINE = "proline: the reader's field 'proline' has no default and the writer does not write it"


def unreadable(schema_id: int, version: int | None = 3) -> UnreadableWriter:
    return UnreadableWriter(SUBJECT, version, schema_id, "wine.WineFeatures", (PROLINE,))


def read_back(metrics: Metrics) -> tuple[writers.WriterSchemaDeadLetters, ...]:
    text = generate_latest(metrics.registry).decode()
    return writers.read(text_string_to_metric_families(text))


def test_a_replica_counts_dead_letters_by_writer_schema_and_says_why() -> None:
    metrics = Metrics(app="wine", streamlet="classifier", replica=0)
    for _ in range(10):
        metrics.writer_schemas.dead_letter("in", unreadable(7))
    metrics.writer_schemas.dead_letter("in", unreadable(9, version=None))

    found = {e.schema_id: e for e in read_back(metrics)}
    assert found[7] == writers.WriterSchemaDeadLetters(
        port="in",
        subject=SUBJECT,
        version=3,
        schema_id=7,
        count=10,
        writer="wine.WineFeatures",
        reason=PROLINE,
    )
    assert found[7].describe() == (
        f"10 from a new writer schema: version 3 of {SUBJECT} (id 7): cannot read: {PROLINE}"
    )
    assert (
        found[9]
        .describe()
        .startswith(
            f"1 from a new writer schema: schema id 9 (not a version of {SUBJECT}): cannot read: "
        )
    )


def test_the_writer_schemas_a_port_tracks_are_bounded_and_the_rest_summed() -> None:
    metrics = Metrics(app="wine", streamlet="classifier", replica=0)
    extra = 3
    for schema_id in range(counted.MAX_WRITERS_PER_PORT + extra):
        metrics.writer_schemas.dead_letter("in", unreadable(100 + schema_id))
        metrics.writer_schemas.dead_letter("in", unreadable(100 + schema_id))
    metrics.writer_schemas.dead_letter("other-in", unreadable(999))  # another port's own

    found = read_back(metrics)
    on_in = [e for e in found if e.port == "in"]
    assert len(on_in) == counted.MAX_WRITERS_PER_PORT + 1
    others = [e for e in on_in if e.other]
    assert [(e.count, e.subject) for e in others] == [(2 * extra, "")]
    assert others[0].describe() == (
        f"{2 * extra} from other new writer schemas "
        f"(more than {counted.MAX_WRITERS_PER_PORT} on in)"
    )
    assert sum(e.count for e in found) == 2 * (counted.MAX_WRITERS_PER_PORT + extra) + 1
    # a reason is bounded too: it is a label
    long = UnreadableWriter(SUBJECT, 4, 5, "w", tuple(f"field{i}: missing" for i in range(200)))
    assert len(counted.reason(long)) == counted.MAX_REASON_CHARS


def test_replicas_are_summed_and_the_biggest_burst_comes_first() -> None:
    one = writers.WriterSchemaDeadLetters("in", SUBJECT, 3, 7, 4, "w", PROLINE)
    two = writers.WriterSchemaDeadLetters("in", SUBJECT, 3, 7, 6, "w", PROLINE)
    small = writers.WriterSchemaDeadLetters("in", SUBJECT, 4, 8, 2, "w", "why")
    other = writers.WriterSchemaDeadLetters("in", "", None, None, 50)
    assert writers.summed([(one, small), (two, other), ()]) == (
        writers.WriterSchemaDeadLetters("in", SUBJECT, 3, 7, 10, "w", PROLINE),
        small,
        other,
    )


def status_with(entries: tuple[writers.WriterSchemaDeadLetters, ...]) -> targets.AppStatus:
    streamlet = targets.StreamletStatus(
        "classifier", desired=1, ready=1, running=1, writer_schemas=entries
    )
    return targets.AppStatus("wine", "local", targets.Phase.RUNNING, "", True, (streamlet,))


def test_status_has_a_line_per_writer_schema_and_json_names_its_parts() -> None:
    entry = writers.WriterSchemaDeadLetters("in", SUBJECT, 3, 7, 10, "wine.WineFeatures", PROLINE)
    status = status_with((entry,))
    [line] = deploy_views.writer_schema_lines(status)
    assert line.plain == (
        "classifier.in  dead letters: 10 from a new writer schema: "
        f"version 3 of {SUBJECT} (id 7): cannot read: {PROLINE}"
    )
    [data] = status.to_dict()["streamlets"][0]["writer_schemas"]
    assert data == {
        "port": "in",
        "subject": SUBJECT,
        "version": 3,
        "schema_id": 7,
        "count": 10,
        "writer": "wine.WineFeatures",
        "reason": PROLINE,
    }


def test_the_web_snapshot_shows_the_burst_on_its_streamlet() -> None:
    metrics = [Metrics(app="wine", streamlet="classifier", replica=i) for i in range(2)]
    for replica, n in zip(metrics, (3, 4), strict=True):
        replica.port(replica.records_dlq, "in").inc(n)
        for _ in range(n):
            replica.writer_schemas.dead_letter("in", unreadable(7))
    scraped = {
        f"classifier-{i}": scrape.parse(generate_latest(m.registry).decode())
        for i, m in enumerate(metrics)
    }
    replicas = tuple(
        targets.ReplicaStatus(name, "classifier", i, running=True, ready=True)
        for i, name in enumerate(scraped)
    )
    streamlet = targets.StreamletStatus(
        "classifier", desired=2, ready=2, running=2, replicas=replicas
    )
    status = targets.AppStatus("wine", "local", targets.Phase.RUNNING, "", True, (streamlet,))
    graph = Graph(
        app="wine",
        streamlets=(StreamletNode("classifier", "x:Classifier", "processor", 2),),
        topics=(TopicNode("features", 1, 1, True, False),),
        edges=(Edge("classifier", "in", "features", "wine.WineFeatures", "consume"),),
    )
    data = snapshot.build(
        graph=graph,
        status=status,
        newer=snapshot.Reading(at=1.0, replicas=scraped),
        older=None,
        records=snapshot.Records(),
        formats={},
        dlq_topics={"classifier": "wine.classifier.dlq"},
        now=0.0,
    )
    dead = data["streamlets"][0]["dead_letters"]
    assert dead["count"] == 7
    [burst] = dead["writer_schemas"]
    assert (burst["subject"], burst["version"], burst["schema_id"]) == (SUBJECT, 3, 7)
    assert burst["count"] == 7
    assert burst["text"] == (
        f"7 from a new writer schema: version 3 of {SUBJECT} (id 7): cannot read: {PROLINE}"
    )
