"""Subjects streamflow creates protect the application's consumers (the real registry).

A producing port with ``register: auto`` creates its topic's subject. When the
application also consumes that topic, the subject gets FORWARD_TRANSITIVE (or
FULL_TRANSITIVE for a topic that keeps its records) before the first schema
goes in, so another team's producer cannot register a schema our consumers
cannot read: the registry refuses it, instead of its records being dead-lettered.
A subject someone else made is left as it is.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streamflow.blueprint.model import Application
from streamflow.runtime.codecs import Codecs
from streamflow.runtime.registry import ConfluentRegistry
from streamflow.schema.registry import RegistryUnavailable
from tests.runtime import support

READING = support.STORE.get("tests.runtime.Reading")
# what another team's producer might write: `value` gone, which our consumer needs
WITHOUT_VALUE = {
    **READING.raw,
    "fields": [f for f in READING.raw["fields"] if f["name"] != "value"],
}


def app_with(registry_url: str, topic: dict[str, Any]) -> tuple[Application, str]:
    name = f"readings-{uuid.uuid4().hex[:10]}"
    app = Application.from_dict(
        {
            "name": "protect",
            "schema_paths": [str(support.HERE / "schemas")],
            "python_paths": [str(support.HERE)],
            "kafka": {"schema_registry": registry_url, "register": "auto"},
            "streamlets": {"scale": {"class": "apps:Scale"}},
            "topics": {name: {"format": "avro-registry", **topic}},
        }
    )
    return app, name


def start_producer(app: Application, topic: str, registry_url: str) -> None:
    """What a replica does at start for a producing port: its codec, its schema's id."""
    codecs = Codecs(app, support.STORE, registry=ConfluentRegistry(registry_url))
    codecs.for_topic(app.topics[topic], READING.name, producing=True)


def register_schema(client: SchemaRegistryClient, subject: str, doc: dict[str, Any]) -> int:
    return int(client.register_schema(subject, Schema(json.dumps(doc), "AVRO")))


@pytest.mark.parametrize(
    ("config", "level"),
    [({}, "FORWARD_TRANSITIVE"), ({"cleanup.policy": "compact"}, "FULL_TRANSITIVE")],
    ids=["deleted-in-time", "compacted"],
)
def test_a_consumed_subject_streamflow_creates_refuses_a_schema_its_consumers_cannot_read(
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
    config: dict[str, str],
    level: str,
) -> None:
    app, topic = app_with(
        schema_registry_url,
        {"producers": ["scale.out"], "consumers": ["scale.in"], "config": config},
    )
    start_producer(app, topic, schema_registry_url)
    subject = f"{topic}-value"
    assert schema_registry_client.get_compatibility(subject) == level
    with pytest.raises(SchemaRegistryError) as refused:
        register_schema(schema_registry_client, subject, WITHOUT_VALUE)
    assert refused.value.http_status_code == 409, refused.value
    assert len(schema_registry_client.get_versions(subject)) == 1  # only ours


def test_a_subject_someone_else_made_keeps_its_level(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    app, topic = app_with(
        schema_registry_url, {"producers": ["scale.out"], "consumers": ["scale.in"]}
    )
    subject = f"{topic}-value"
    register_schema(schema_registry_client, subject, READING.raw)
    schema_registry_client.set_compatibility(subject_name=subject, level="BACKWARD")
    start_producer(app, topic, schema_registry_url)
    assert schema_registry_client.get_compatibility(subject) == "BACKWARD"


def test_a_subject_only_produced_to_is_left_at_the_registrys_default(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    app, topic = app_with(schema_registry_url, {"producers": ["scale.out"]})
    start_producer(app, topic, schema_registry_url)
    subject = f"{topic}-value"
    assert schema_registry_client.get_versions(subject) == [1]
    assert "TRANSITIVE" not in schema_registry_client.get_compatibility(subject)


def test_replicas_starting_together_on_a_new_subject_all_start(schema_registry_url: str) -> None:
    """Replicas of a streamlet register a subject's first version at the same moment.
    Apicurio answered one of them 409 "artifact already exists", a refusal, and that
    replica failed and was restarted (seen in a clean-clone run). It must find the schema
    there instead. A registry that cannot answer yet is waited for, as a replica does."""
    app, topic = app_with(schema_registry_url, {"consumers": ["scale.in"]})
    replicas = 6
    ready = threading.Barrier(replicas)
    failed: list[BaseException] = []

    def start() -> None:
        ready.wait(timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                start_producer(app, topic, schema_registry_url)
                return
            except RegistryUnavailable:  # what a replica waits out (runtime.replica._bindings)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # a retry's pause, not a synchronisation
            except BaseException as exc:  # each failure is the finding
                failed.append(exc)
                return

    threads = [threading.Thread(target=start) for _ in range(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert failed == []
    versions = SchemaRegistryClient({"url": schema_registry_url}).get_versions(f"{topic}-value")
    assert versions  # Apicurio may keep a version per racing replica: the same schema each
