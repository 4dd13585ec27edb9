"""The generator under the runtime: into Kafka, out to a file, and stopped while pacing.

KAFKA_E2E.md items 1 (generator -> topic -> FileEgress), 6 (the schema store
hand-over) and 7 (stopping a slow source).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path

from streamflow.api.streamlet import Context
from streamflow.blueprint import load_application
from streamflow.blueprint.model import Application
from streamflow.schema import SchemaStore
from streamflow.streamlets.io import Synthesiser, _binding
from tests.streamlets.io_kafka import iohelpers as h

N = 100


def test_generator_to_topic_to_file_egress_has_every_record_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    out = tmp_path / "events.jsonl"
    app = h.make_app(
        kafka_bootstrap,
        streamlets={
            "gen": {
                "class": "ioapps:EventGenerator",
                "config": {"count": N, "key_field": "id", "seed": 11},
            },
            "sink": {"class": "ioapps:EventSink", "config": {"path": str(out)}},
        },
        topics={"events": {"producers": ["gen.out"], "consumers": ["sink.in"], "partitions": 3}},
    )
    with h.replicas(app, tmp_path) as running:
        running.start("gen")
        running.start("sink")
        h.wait(running, lambda: len(h.jsonl(out)) >= N, timeout=30, message=f"{N} lines in {out}")
        log = running.log()
    # stopped cleanly (each replica commits and closes): nothing more may appear
    written = h.jsonl(out)

    expected = list(Synthesiser(h.STORE.get(h.EVENT), seed=11).records(count=N))
    assert len(written) == N, log
    assert sorted(written, key=lambda r: r["id"]) == sorted(
        json.loads(json.dumps(expected)), key=lambda r: r["id"]
    )

    records = h.consume_until(kafka_bootstrap, h.topic(app, "events"), h.count_at_least(N))
    assert len(records) == N
    decode = h.codec().decode
    for msg in records:
        headers = dict(msg.headers() or [])
        assert headers["streamflow-schema"] == h.EVENT.encode()
        value = decode(msg.value())
        assert msg.key() == str(value["id"]).encode()
    assert {str(decode(m.value())["id"]) for m in records} == {r["id"] for r in expected}


PING_SCHEMA = {
    "type": "record",
    "name": "Ping",
    "namespace": "iokafka.elsewhere",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        # a built-in schema type, referenced by name from a schema outside schemas/
        {"name": "model", "type": ["null", "streamflow.ml.ModelDescriptor"], "default": None},
    ],
}


def test_a_blueprint_with_schemas_outside_the_project_runs_the_built_ins(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    (contracts / "ping.avsc").write_text(json.dumps(PING_SCHEMA))
    name = f"ping{uuid.uuid4().hex[:8]}"
    out = tmp_path / "pings.jsonl"
    blueprint = tmp_path / "blueprint.yaml"
    blueprint.write_text(
        f"name: {name}\n"
        f"schemas: [contracts]\n"
        f"python_paths: [{h.HERE}]\n"
        "streamlets:\n"
        "  gen: {class: 'ioapps:PingGenerator', config: {count: 20, seed: 3}}\n"
        f"  sink: {{class: 'ioapps:PingSink', config: {{path: '{out}'}}}}\n"
        "topics:\n"
        f"  {name}-pings: {{producers: [gen.out], consumers: [sink.in]}}\n"
    )
    app = load_application(blueprint, overrides={})
    # Without the runtime's store the built-ins would look in the project's schemas/ and fail:
    bare = Context(app="a", streamlet="s", replica=0, config={}, logger=logging.getLogger("t"))
    assert "iokafka.elsewhere.Ping" not in _binding.schema_store(bare)
    assert "iokafka.elsewhere.Ping" in SchemaStore(app.schema_paths)

    # The blueprint names no Kafka (`streamflow run -b` would give it); the replicas need one.
    app = Application.from_dict({**app.to_dict(), "kafka": {"bootstrap": kafka_bootstrap}})
    h.create_topics(kafka_bootstrap, app)
    with h.replicas(app, tmp_path) as running:
        running.start("gen")
        running.start("sink")
        h.wait(running, lambda: len(h.jsonl(out)) >= 20, timeout=30, message=f"20 lines in {out}")
        log = running.log()
    pings = h.jsonl(out)
    assert len(pings) == 20, log
    assert all(set(p) == {"id", "at", "model"} for p in pings)


def test_a_slow_generator_stops_within_seconds_of_sigterm(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app = h.make_app(
        kafka_bootstrap,
        streamlets={"gen": {"class": "ioapps:EventGenerator", "config": {"rate": 0.5}}},
        topics={"events": {"producers": ["gen.out"]}},
    )
    with h.replicas(app, tmp_path) as running:
        replica = running.start("gen")
        # The first record goes out at once; the source then sleeps 2 s before the next.
        h.consume_until(kafka_bootstrap, h.topic(app, "events"), h.count_at_least(1), timeout=30)
        process = replica.process
        assert process is not None and process.poll() is None
        started = time.monotonic()
        running.group.remove(replica.name, timeout=20)  # SIGTERM, then wait for the exit
        elapsed = time.monotonic() - started
        log = running.log()
    assert process.returncode == 0, log
    assert elapsed < 2.5, f"took {elapsed:.1f}s to stop\n{log}"
    assert "stopped cleanly" in log
