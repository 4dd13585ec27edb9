"""Registry topic formats end to end: replicas on the real broker and a real schema registry.

Nothing is lost: every input comes out or is dead-lettered, a registry outage
holds records back (backpressure) instead of dead-lettering them, and a
producer that evolves its schema compatibly mid-stream does not stop the app.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from typer.testing import CliRunner

from streamflow.cli.main import app as cli
from streamflow.runtime.registry import ConfluentRegistry
from streamflow.schema.formats import subject_for
from streamflow.schema.registry import SchemaNotRegistered, registry_text, schema_id_of
from streamflow.schema.registry_codecs import RegistryAvroCodec, RegistryJsonCodec
from tests.runtime import support
from tests.runtime.registry_support import (
    ERROR_HEADERS,
    OLDER_READING,
    READING,
    SCALED,
    RegistryRoute,
    avro_inputs,
    keys,
    metric,
    no_more_than,
    read_topic,
    reading,
    registry_app,
    scaled_outputs,
    unready_reasons,
    value_context,
    wait_showing_log,
)


def test_avro_registry_in_and_json_registry_out_lose_nothing(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    app = registry_app(
        kafka_bootstrap, schema_registry_url, in_format="avro-registry", out_format="json-registry"
    )
    source, sink = support.topic(app, "in"), support.topic(app, "out")
    inputs = avro_inputs(schema_registry_url, source, range(300))
    out = scaled_outputs(kafka_bootstrap, app, tmp_path, inputs)

    registry = ConfluentRegistry(schema_registry_url)
    registered = registry.latest(subject_for(sink))
    assert registered is not None and registered.schema_type == "JSON"
    assert json.loads(registered.text) == json.loads(registry_text(SCALED, "JSON"))
    assert {schema_id_of(m.value()) for m in out} == {registered.schema_id}
    decoder = RegistryJsonCodec(SCALED, registry, subject=subject_for(sink), register=False)
    values = {m.key().decode(): decoder.decode(m.value()) for m in out}
    assert set(values) == {f"r{i}" for i in range(300)}
    assert values["r42"] == {
        "id": "r42",
        "seq": 42,
        "value": 42.0,
        "factor_version": 0,
        "replica": 0,
    }


def test_unknown_schema_ids_and_garbage_are_dead_lettered_and_nothing_is_lost(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    app = registry_app(
        kafka_bootstrap, schema_registry_url, in_format="avro-registry", out_format="avro-registry"
    )
    source, sink = support.topic(app, "in"), support.topic(app, "out")
    good = avro_inputs(schema_registry_url, source, range(200))
    body = good[0][1][5:]
    unknown_id = 2_000_000_000  # far past any id this registry has handed out
    bad = [
        ("unknown-id", b"\x00" + unknown_id.to_bytes(4, "big") + body),
        ("garbage", b"plain text, not framed"),
        ("empty", b""),
        ("truncated", good[1][1][:7]),
    ]
    inputs = good[:100] + bad + good[100:]
    support.produce(kafka_bootstrap, source, inputs)

    with support.replicas(app, tmp_path) as running:
        running.start("scale")
        out = support.consume_until(
            kafka_bootstrap, sink, lambda records: no_more_than(records, 200)
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("scale"), lambda records: no_more_than(records, 4)
        )
        assert len(out) + len(dead) == len(inputs), running.log()

    assert keys(out) == {f"r{i}" for i in range(200)}
    by_key = {m.key().decode(): dict(m.headers() or []) for m in dead}
    assert set(by_key) == {key for key, _ in bad}
    for headers in by_key.values():
        assert all(name in headers for name in ERROR_HEADERS), headers
        assert headers["streamflow-error-type"] == b"DecodeError"
        assert headers["streamflow-source-topic"] == source.encode()
    assert (
        f"schema id {unknown_id} is not in the registry".encode()
        in (by_key["unknown-id"]["streamflow-error"])
    )
    assert b"not in the schema registry wire format" in by_key["garbage"]["streamflow-error"]
    assert b"got empty" in by_key["empty"]["streamflow-error"]
    assert b"truncated" in by_key["truncated"]["streamflow-error"]
    originals = dict(inputs)
    assert all(m.value() == originals[m.key().decode()] for m in dead)  # replayable as written


def test_a_registry_outage_is_backpressure_not_dead_letters(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    # The app reaches the registry through a route this test cuts: the outage is
    # the app's alone (the session's registry keeps serving the other tests), and
    # the same ids resolve when the route is restored, as after a registry restart.
    with RegistryRoute(schema_registry_url) as route:
        _outage(kafka_bootstrap, route, tmp_path)


def _outage(kafka_bootstrap: str, registry: RegistryRoute, tmp_path: Path) -> None:
    app = registry_app(
        kafka_bootstrap, registry.url, in_format="avro-registry", out_format="avro-registry"
    )
    source, sink = support.topic(app, "in"), support.topic(app, "out")
    subject = subject_for(source)
    # An older version of Reading (no `poison`): the replica has not met its id yet.
    client = SchemaRegistryClient({"url": registry.url})
    older_id = client.register_schema(subject, Schema(json.dumps(OLDER_READING), "AVRO"))
    older_serializer = AvroSerializer(
        client, json.dumps(OLDER_READING), conf={"auto.register.schemas": False}
    )
    context = value_context(source)
    held_back = [
        (f"r{i}", older_serializer({"id": f"r{i}", "seq": i, "value": float(i)}, context))
        for i in range(100, 150)
    ]
    assert all(schema_id_of(value) == older_id for _, value in held_back)

    with support.replicas(app, tmp_path) as running:
        replica = running.start("scale")
        support.produce(kafka_bootstrap, source, avro_inputs(registry.url, source, range(20)))
        first = support.consume_until(kafka_bootstrap, sink, support.count_at_least(20))
        assert len(first) == 20, running.log()

        registry.cut()
        support.produce(kafka_bootstrap, source, held_back)
        # Every held-back record needs the older id: a batch of them was tried, held
        # back, tried again after its wait and held back again. That has happened
        # once the counter reads 2, and the replica says why it is not ready.
        wait_showing_log(
            lambda: metric(replica, "streamflow_errors_total", kind="backpressure") >= 2,
            running,
            timeout=120,
            message="the replica to back off twice while the registry is down",
        )
        wait_showing_log(
            lambda: any(
                reason.startswith("backing off") and "schema registry" in reason
                for reason in unready_reasons(replica)
            ),
            running,
            timeout=60,
            message="/readyz to say the replica backs off for the schema registry",
        )
        # ... and nothing of it is out or dead-lettered: each topic read to its end
        during = read_topic(kafka_bootstrap, sink)
        assert len(during) == 20 and keys(during) == keys(first), running.log()
        assert read_topic(kafka_bootstrap, app.dlq_topic("scale")) == [], running.log()
        assert metric(replica, "streamflow_records_dlq_total") == 0
        assert "backing off" in running.log() and "schema registry" in running.log()

        registry.restore()
        out = support.consume_until(
            kafka_bootstrap, sink, lambda records: no_more_than(records, 70), timeout=120
        )
        assert keys(out) == {f"r{i}" for i in range(20)} | {k for k, _ in held_back}, running.log()
        assert read_topic(kafka_bootstrap, app.dlq_topic("scale")) == [], running.log()
        assert metric(replica, "streamflow_records_dlq_total") == 0


def test_a_producer_that_may_not_register_finds_its_schema_as_the_owner_registered_it(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    # The owner registers the file as written (a namespace, short names); ours is the
    # same schema with full names. A registry may compare texts; the id must be found.
    subject = f"readings-{uuid.uuid4().hex[:10]}-value"
    as_written = (support.HERE / "schemas" / "reading.avsc").read_text()
    owner_id = schema_registry_client.register_schema(subject, Schema(as_written, "AVRO"))
    registry = ConfluentRegistry(schema_registry_url)
    assert registry.id_for(subject, "AVRO", registry_text(READING, "AVRO"), register=False) == (
        owner_id
    )
    codec = RegistryAvroCodec(READING, registry, subject=subject, register=False)
    assert codec.prepare() == owner_id
    assert schema_registry_client.get_versions(subject) == [1]  # nothing registered by us
    with pytest.raises(SchemaNotRegistered, match=r"not registered under subject"):
        registry.id_for(subject, "AVRO", registry_text(SCALED, "AVRO"), register=False)


# -- schema evolution ----------------------------------------------------------


def evolved(extra: list[dict[str, Any]], *, drop: str = "") -> dict[str, Any]:
    fields = [f for f in READING.raw["fields"] if f["name"] != drop]
    return {**READING.raw, "fields": fields + extra}


V2 = evolved([{"name": "unit", "type": "string", "default": "C"}])
V3 = evolved([{"name": "value", "type": "string"}], drop="value")  # a double becomes a string

V3_FEED = '''\
"""A producer of Reading v3 (its `value` a string), for `verify --registry`."""

from collections.abc import Iterator
from typing import Any

from streamflow import Outlet, Streamlet


class Feed(Streamlet):
    out = Outlet(schema="tests.runtime.Reading")

    def source(self) -> Iterator[dict[str, Any]]:
        yield {"id": "r0", "seq": 0, "poison": False, "value": "zero"}
'''


def test_a_producer_evolves_compatibly_mid_stream_and_an_incompatible_schema_is_refused(
    kafka_bootstrap: str,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
    tmp_path: Path,
) -> None:
    app = registry_app(
        kafka_bootstrap, schema_registry_url, in_format="avro-registry", out_format="avro-registry"
    )
    source, sink = support.topic(app, "in"), support.topic(app, "out")
    subject = subject_for(source)
    schema_registry_client.set_compatibility(subject_name=subject, level="BACKWARD")
    context = value_context(source)
    v1 = AvroSerializer(schema_registry_client, json.dumps(READING.raw))
    v2 = AvroSerializer(schema_registry_client, json.dumps(V2))

    with support.replicas(app, tmp_path) as running:
        running.start("scale")
        support.produce(
            kafka_bootstrap, source, [(f"r{i}", v1(reading(i), context)) for i in range(100)]
        )
        support.consume_until(kafka_bootstrap, sink, support.count_at_least(100))
        support.produce(
            kafka_bootstrap,
            source,
            [(f"r{i}", v2({**reading(i), "unit": "K"}, context)) for i in range(100, 200)],
        )
        out = support.consume_until(
            kafka_bootstrap, sink, lambda records: no_more_than(records, 200)
        )
        assert keys(out) == {f"r{i}" for i in range(200)}, running.log()
        # and none was dead-lettered on the way: the DLQ, read to its end, is empty
        assert read_topic(kafka_bootstrap, app.dlq_topic("scale")) == [], running.log()

    versions = schema_registry_client.get_versions(subject)
    assert len(versions) == 2
    with pytest.raises(SchemaRegistryError) as refused:
        schema_registry_client.register_schema(subject, Schema(json.dumps(V3), "AVRO"))
    assert refused.value.http_status_code == 409
    assert schema_registry_client.get_versions(subject) == versions

    blueprint = _v3_blueprint(tmp_path, source)
    result = CliRunner().invoke(cli, ["verify", str(blueprint), "--registry", schema_registry_url])
    assert "Traceback" not in result.output
    assert result.exit_code == 1, result.output
    producers = next(
        number
        for number, line in enumerate(blueprint.read_text().splitlines(), start=1)
        if "producers:" in line
    )
    assert f"{blueprint}:{producers}:" in result.stdout
    assert "error[incompatible-schema]" in result.stdout
    assert f"subject {subject}" in result.stdout


def _v3_blueprint(directory: Path, topic: str) -> Path:
    """A blueprint whose only streamlet writes Reading v3 to ``topic``."""
    schemas = directory / "v3-schemas"
    schemas.mkdir()
    (schemas / "reading.avsc").write_text(json.dumps(V3))
    module = f"v3_feed_{uuid.uuid4().hex[:8]}"  # verify imports it into this process
    (directory / f"{module}.py").write_text(V3_FEED)
    path = directory / "v3.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: v3
            schemas: [{schemas}]
            python_paths: [{directory}]
            streamlets:
              feed:
                class: {module}:Feed
            topics:
              {topic}:
                producers: [feed.out]
                format: avro-registry
                register: auto
            """
        )
    )
    return path
