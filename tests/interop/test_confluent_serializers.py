"""confluent-kafka's own registry serializers against a streamflow application, both ways.

Records written by `AvroSerializer` and `JSONSerializer` are read by the app;
what the app writes is read by `AvroDeserializer` and by `JSONDeserializer`,
which validates it against the JSON Schema the app registered. Avro bodies
must match byte for byte: the same value and schema id are the same bytes.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import SerializationError

from streamflow.runtime.registry import ConfluentRegistry
from streamflow.schema import SchemaStore
from streamflow.schema import jsonschema as json_schemas
from streamflow.schema.formats import subject_for
from streamflow.schema.registry import registry_text, schema_id_of
from streamflow.schema.registry_codecs import RegistryAvroCodec
from tests.runtime import support
from tests.runtime.registry_support import (
    OLDER_READING,
    READING,
    SCALED,
    reading,
    registry_app,
    scaled_outputs,
    value_context,
)

READING_AVSC = (support.HERE / "schemas" / "reading.avsc").read_text()
# What a team outside streamflow would hand-write for the readings it produces.
READING_JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Reading",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "seq": {"type": "integer"},
        "value": {"type": "number"},
        "poison": {"type": "boolean"},
    },
    "required": ["id", "seq", "value"],
}


def scaled(i: int) -> dict[str, Any]:
    return {"id": f"r{i}", "seq": i, "value": float(i), "factor_version": 0, "replica": 0}


def test_avro_serializer_in_and_avro_deserializer_out(
    kafka_bootstrap: str,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
    tmp_path: Path,
) -> None:
    app = registry_app(
        kafka_bootstrap, schema_registry_url, in_format="avro-registry", out_format="avro-registry"
    )
    source, sink = support.topic(app, "in"), support.topic(app, "out")
    serialize = AvroSerializer(schema_registry_client, READING_AVSC)
    inputs = [(f"r{i}", serialize(reading(i), value_context(source))) for i in range(150)]
    assert inputs[0][1] is not None and inputs[0][1][0] == 0
    out = scaled_outputs(kafka_bootstrap, app, tmp_path, inputs)  # type: ignore[arg-type]

    any_writer = AvroDeserializer(schema_registry_client)
    with_reader = AvroDeserializer(
        schema_registry_client, (support.HERE / "schemas" / "scaled.avsc").read_text()
    )
    for message in out:
        i = int(message.key().decode()[1:])
        assert any_writer(message.value(), value_context(sink)) == scaled(i)
        assert with_reader(message.value(), value_context(sink)) == scaled(i)
    registered = schema_registry_client.get_latest_version(subject_for(sink))
    assert {schema_id_of(m.value()) for m in out} == {registered.schema_id}


def test_json_serializer_in_and_json_deserializer_out(
    kafka_bootstrap: str,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
    tmp_path: Path,
) -> None:
    app = registry_app(
        kafka_bootstrap, schema_registry_url, in_format="json-registry", out_format="json-registry"
    )
    source, sink = support.topic(app, "in"), support.topic(app, "out")
    serialize = JSONSerializer(json.dumps(READING_JSON_SCHEMA), schema_registry_client)
    inputs = [(f"r{i}", serialize(reading(i), value_context(source))) for i in range(150)]
    out = scaled_outputs(kafka_bootstrap, app, tmp_path, inputs)  # type: ignore[arg-type]

    registered = schema_registry_client.get_latest_version(subject_for(sink))
    assert registered.schema.schema_type == "JSON"
    assert json.loads(registered.schema.schema_str) == json_schemas.from_avro(SCALED)
    # the writer's schema comes from the registry by the record's id, and validates it
    deserialize = JSONDeserializer(None, schema_registry_client=schema_registry_client)
    for message in out:
        assert schema_id_of(message.value()) == registered.schema_id
        i = int(message.key().decode()[1:])
        assert deserialize(message.value(), value_context(sink)) == scaled(i)
    # ... for real: a document the app's JSON Schema forbids is refused
    header = out[0].value()[:5]
    for forbidden in (b'{"id": "r1", "seq": 1}', b'{"id": 1, "seq": 1, "value": 1.0}'):
        with pytest.raises(SerializationError):
            deserialize(header + forbidden, value_context(sink))


def test_our_avro_registry_bytes_are_avro_serializers_bytes(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(ORDER)
    order = store.get("tests.interop.Order")
    topic = f"orders-{uuid.uuid4().hex[:10]}"
    ours = RegistryAvroCodec(
        order,
        ConfluentRegistry(schema_registry_url),
        subject=subject_for(topic),
        register=True,
    )
    schema_id = ours.prepare()
    theirs = AvroSerializer(
        schema_registry_client,
        registry_text(order, "AVRO"),
        conf={"auto.register.schemas": False, "use.latest.version": True},
    )
    reader = AvroDeserializer(schema_registry_client)
    for value in ORDERS:
        data = ours.encode(value)
        assert data == theirs(value, value_context(topic)), value
        assert schema_id_of(data) == schema_id
        assert reader(data, value_context(topic)) == ours.decode(data)
    # the schema as a team would write it (short names): the same Avro body
    as_written = AvroSerializer(schema_registry_client, json.dumps(ORDER))
    for value in ORDERS:
        assert as_written(value, value_context(topic))[5:] == ours.encode(value)[5:]


def test_our_readers_take_avro_serializer_bytes_of_an_older_version(
    schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    topic = f"readings-{uuid.uuid4().hex[:10]}"
    schema_registry_client.register_schema(
        subject_for(topic), Schema(json.dumps(OLDER_READING), "AVRO")
    )
    serialize = AvroSerializer(schema_registry_client, json.dumps(OLDER_READING))
    data = serialize({"id": "r1", "seq": 1, "value": 1.5}, value_context(topic))
    ours = RegistryAvroCodec(
        READING, ConfluentRegistry(schema_registry_url), subject=subject_for(topic), register=False
    )
    assert ours.decode(data) == {"id": "r1", "seq": 1, "value": 1.5, "poison": False}


ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "tests.interop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "payload", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "email", "type": ["null", "string"], "default": None},
                ],
            },
        },
        {"name": "lines", "type": {"type": "array", "items": "double"}},
        {"name": "attributes", "type": {"type": "map", "values": "long"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "referrer", "type": ["null", "Customer"], "default": None},
    ],
}
ORDERS = [
    {
        "id": "o1",
        "count": 3,
        "ratio": 0.5,
        "payload": b"\x00\xff",
        "at": dt.datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=dt.UTC),
        "customer": {"name": "Ada", "email": None},
        "lines": [1.5, -2.0],
        "attributes": {"k": 1},
        "status": "PAID",
        "referrer": {"name": "Bob", "email": "bob@example.com"},
    },
    {
        "id": "ö-ünïcode-✓",
        "count": -(2**62),
        "ratio": -1.25,
        "payload": b"",
        "at": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC),
        "customer": {"name": "", "email": "x@y"},
        "lines": [],
        "attributes": {},
        "status": "NEW",
        "referrer": None,
    },
]
