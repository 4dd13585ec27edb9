"""The development schema registry: Confluent's client registers, reads and is refused by it.

Each test reads through a fresh client where it reads back, since the client caches what
it registered: the answer must come from the registry, over the endpoints the runtime uses
(`/schemas/ids/{id}`, `/compatibility/subjects/{s}/versions/latest`, `/subjects/{s}`).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streamflow import devkit
from streamflow.devkit import DevkitError, SchemaRegistry

READING_V1 = {
    "type": "record",
    "name": "Reading",
    "namespace": "test.registry",
    "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}],
}


def avro(schema: dict[str, object]) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def with_field(field: dict[str, object]) -> dict[str, object]:
    fields = READING_V1["fields"]
    assert isinstance(fields, list)
    return {**READING_V1, "fields": [*fields, field]}


def fresh_client(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url})


@pytest.fixture
def subject() -> str:
    return f"readings-{uuid.uuid4().hex[:12]}-value"


def test_an_avro_schema_registers_and_comes_back_by_its_id(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient, subject: str
) -> None:
    schema_id = schema_registry_client.register_schema(subject, avro(READING_V1))

    found = fresh_client(schema_registry_url).get_schema(schema_id)
    assert json.loads(found.schema_str) == READING_V1
    assert found.schema_type == "AVRO"


def test_ids_are_global_and_one_schema_has_one_id_across_subjects(
    schema_registry_client: SchemaRegistryClient, subject: str
) -> None:
    other = {**READING_V1, "name": f"Other{uuid.uuid4().hex[:8]}"}
    first = schema_registry_client.register_schema(subject, avro(READING_V1))
    again = schema_registry_client.register_schema(f"copy-{subject}", avro(READING_V1))
    different = schema_registry_client.register_schema(f"other-{subject}", avro(other))
    assert again == first
    assert different != first


def test_a_registry_of_its_own_is_backward_by_default(subject: str) -> None:
    # Started here: the session's registry may be another ($STREAMFLOW_SCHEMA_REGISTRY_URL),
    # whose global rule is its owner's choice.
    with SchemaRegistry() as registry:
        own = fresh_client(registry.url)
        assert own.get_compatibility() == "BACKWARD"
        own.register_schema(subject, avro(READING_V1))
        with pytest.raises(SchemaRegistryError) as refused:  # no rule of the subject's own
            own.register_schema(subject, avro(with_field({"name": "unit", "type": "string"})))
        assert refused.value.http_status_code == 409


def test_a_new_field_without_a_default_is_refused_under_backward(
    schema_registry_client: SchemaRegistryClient, subject: str
) -> None:
    # the subject's own rule: the session's registry may have any global one
    schema_registry_client.set_compatibility(subject_name=subject, level="BACKWARD")
    schema_registry_client.register_schema(subject, avro(READING_V1))
    incompatible = avro(with_field({"name": "unit", "type": "string"}))

    assert schema_registry_client.test_compatibility(subject, incompatible) is False
    with pytest.raises(SchemaRegistryError) as refused:
        schema_registry_client.register_schema(subject, incompatible)
    assert refused.value.http_status_code == 409
    assert schema_registry_client.get_latest_version(subject).version == 1


def test_a_new_field_with_a_default_is_the_next_version(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient, subject: str
) -> None:
    first = schema_registry_client.register_schema(subject, avro(READING_V1))
    compatible = avro(with_field({"name": "unit", "type": "string", "default": "C"}))

    assert schema_registry_client.test_compatibility(subject, compatible) is True
    second = schema_registry_client.register_schema(subject, compatible)
    latest = fresh_client(schema_registry_url).get_latest_version(subject)
    assert second != first
    assert (latest.schema_id, latest.version) == (second, 2)


def test_lookup_names_the_version_of_an_earlier_schema(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient, subject: str
) -> None:
    first = schema_registry_client.register_schema(subject, avro(READING_V1))
    schema_registry_client.register_schema(
        subject, avro(with_field({"name": "n", "type": "int", "default": 0}))
    )

    found = fresh_client(schema_registry_url).lookup_schema(subject, avro(READING_V1))
    assert (found.schema_id, found.version) == (first, 1)


def test_a_json_schema_registers_and_keeps_its_type(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient, subject: str
) -> None:
    document = {
        "type": "object",
        "properties": {"sensor": {"type": "string"}, "value": {"type": "number"}},
        "required": ["sensor"],
    }
    schema_id = schema_registry_client.register_schema(
        subject, Schema(json.dumps(document), "JSON")
    )

    found = fresh_client(schema_registry_url).get_schema(schema_id)
    assert found.schema_type == "JSON"
    assert json.loads(found.schema_str) == document


def test_an_unknown_id_is_a_404_with_confluents_error_code(schema_registry_url: str) -> None:
    with pytest.raises(SchemaRegistryError) as missing:
        fresh_client(schema_registry_url).get_schema(2_000_000_000)
    assert (missing.value.http_status_code, missing.value.error_code) == (404, 40403)


def test_a_registry_of_its_own_takes_its_compatibility_and_stops_clean() -> None:
    with SchemaRegistry(compatibility="FULL") as registry:
        assert registry.is_running
        assert registry.url.startswith("http://127.0.0.1:")
        assert registry.url.endswith("/apis/ccompat/v7")
        assert fresh_client(registry.url).get_compatibility() == "FULL"
        work_dir = registry.work_dir
    assert not registry.is_running
    assert work_dir is not None and not work_dir.exists()
    registry.stop()  # idempotent


def test_a_registry_of_its_own_without_a_rule_takes_any_change(subject: str) -> None:
    with SchemaRegistry(compatibility="NONE") as registry:
        own = fresh_client(registry.url)
        own.register_schema(subject, avro(READING_V1))
        # a new required field: refused under BACKWARD, taken with no rule at all
        own.register_schema(subject, avro(with_field({"name": "unit", "type": "string"})))
        assert own.get_latest_version(subject).version == 2


def test_a_missing_app_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(DevkitError, match="tools/registry/build") as error:
        devkit.find_registry_app(app=tmp_path / "nowhere")
    assert "nowhere" in str(error.value)


def test_a_registry_that_dies_while_starting_is_reported_with_its_output() -> None:
    registry = SchemaRegistry(jvm_options=["-XX:+NoSuchOption"])
    with pytest.raises(DevkitError, match="exited with code") as error:
        registry.start(timeout=60)
    assert "NoSuchOption" in str(error.value)
    assert not registry.is_running
    registry.stop()
