"""A schema registry that goes away is waited for, never a crash and never a dead letter.

Both failed on the first cut of the registry formats: a replica whose
registry was down at start exited (and crash-looped under its supervisor),
and a control record whose schema id could not be looked up killed the
replica. The app reaches the registry through a route each test cuts, so the
outage is that app's alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

from streamflow.blueprint.model import Application
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.topics import ensure_topics
from tests.runtime import support
from tests.runtime.registry_support import (
    RegistryRoute,
    avro_inputs,
    keys,
    no_more_than,
    read_topic,
    registry_app,
    unready_reasons,
    value_context,
    wait_showing_log,
)


def test_a_registry_down_at_start_keeps_the_replica_up_and_waiting(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    with RegistryRoute(schema_registry_url) as route:
        app = registry_app(
            kafka_bootstrap, route.url, in_format="avro-registry", out_format="json-registry"
        )
        source, sink = support.topic(app, "in"), support.topic(app, "out")
        inputs = avro_inputs(schema_registry_url, source, range(30))  # straight to the registry
        route.cut()
        with support.replicas(app, tmp_path) as running:
            replica = running.start("scale")
            # its output's schema id cannot be had: up, not ready, saying why
            wait_showing_log(
                lambda: any(
                    "waiting for the schema registry" in reason
                    for reason in unready_reasons(replica)
                ),
                running,
                timeout=90,
                message="/readyz to say the replica waits for the schema registry",
            )
            support.produce(kafka_bootstrap, source, inputs)
            assert read_topic(kafka_bootstrap, sink) == [], running.log()
            route.restore()
            out = support.consume_until(
                kafka_bootstrap, sink, lambda records: no_more_than(records, 30), timeout=120
            )
            assert keys(out) == {f"r{i}" for i in range(30)}, running.log()
            assert unready_reasons(replica) == []  # also asserts it was never restarted
            assert "replica failed" not in running.log()
            assert read_topic(kafka_bootstrap, app.dlq_topic("scale")) == []


def _controlled_app(bootstrap: str, registry_url: str) -> Application:
    base = support.make_app(
        bootstrap,
        streamlets={"ctl": {"class": "apps:Controlled"}},
        topics={
            "in": {"consumers": ["ctl.in"]},
            "factor": {
                "consumers": ["ctl.factor"],
                "config": {"cleanup.policy": "compact"},
                "format": "avro-registry",
            },
            "out": {"producers": ["ctl.out"]},
            "applied": {"producers": ["ctl.applied"]},
        },
    )
    spec = base.to_dict()
    spec["kafka"]["schema_registry"] = registry_url
    app = Application.from_dict(spec)
    ensure_topics(KafkaClients(bootstrap=bootstrap).admin(), app)
    return app


def test_a_control_record_waits_for_the_registry_and_is_applied_when_it_is_back(
    kafka_bootstrap: str,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
    tmp_path: Path,
) -> None:
    with RegistryRoute(schema_registry_url) as route:
        app = _controlled_app(kafka_bootstrap, route.url)
        factor_topic, applied_topic = support.topic(app, "factor"), support.topic(app, "applied")
        subject = f"{factor_topic}-value"
        factor = support.STORE.get("tests.runtime.Factor").raw
        # a later version of Factor, with a note: an id the replica has not met
        noted = {
            **factor,
            "fields": [*factor["fields"], {"name": "note", "type": "string", "default": ""}],
        }
        context = value_context(factor_topic)
        first = AvroSerializer(schema_registry_client, json.dumps(factor))(
            {"version": 1, "factor": 2.0}, context
        )
        schema_registry_client.register_schema(subject, Schema(json.dumps(noted), "AVRO"))
        second = AvroSerializer(
            schema_registry_client, json.dumps(noted), conf={"auto.register.schemas": False}
        )({"version": 2, "factor": 3.0, "note": "after the outage"}, context)
        applied = support.codec("tests.runtime.Applied")

        def versions(records: list) -> set[int]:  # type: ignore[type-arg]
            return {applied.decode(m.value())["version"] for m in records}

        support.produce(kafka_bootstrap, factor_topic, [("f", first)])
        with support.replicas(app, tmp_path) as running:
            replica = running.start("ctl")
            support.consume_until(kafka_bootstrap, applied_topic, lambda r: 1 in versions(r))
            route.cut()
            support.produce(kafka_bootstrap, factor_topic, [("f", second)])
            wait_showing_log(
                lambda: "control inlet waits for the schema registry" in running.log(),
                running,
                timeout=90,
                message="the replica to say its control inlet waits for the registry",
            )
            # data keeps flowing under the factor it has, and nothing is rejected
            support.produce(kafka_bootstrap, support.topic(app, "in"), support.readings(20))
            out = support.consume_until(
                kafka_bootstrap, support.topic(app, "out"), support.count_at_least(20)
            )
            assert len(out) == 20, running.log()
            assert versions(read_topic(kafka_bootstrap, applied_topic)) == {1}
            route.restore()
            support.consume_until(kafka_bootstrap, applied_topic, lambda r: 2 in versions(r))
            assert unready_reasons(replica) == []  # also asserts it was never restarted
            assert read_topic(kafka_bootstrap, app.dlq_topic("ctl")) == [], running.log()
