"""The registry wire-format codecs, over an in-memory registry: bytes, resolution, failures."""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from typing import Any

import jsonschema as jsonschema_lib
import pytest
from fastavro import parse_schema, schemaless_writer

from streamflow.schema import Schema
from streamflow.schema import jsonschema as json_schemas
from streamflow.schema.codecs import DecodeError, EncodeError, JsonTopicCodec
from streamflow.schema.registry import (
    RegistryRefused,
    RegistrySchema,
    RegistryUnavailable,
    SchemaNotRegistered,
    UnknownSchemaId,
    UnreadableWriterSchema,
    registry_text,
    schema_id_of,
)
from streamflow.schema.registry_codecs import RegistryAvroCodec, RegistryJsonCodec

SUBJECT = "readings-value"
READING_V1 = {
    "type": "record",
    "name": "Reading",
    "namespace": "tests.registry",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "value", "type": "double"},
    ],
}
READING_V2 = {  # v1 plus a field with a default: a compatible evolution
    **READING_V1,
    "fields": [*READING_V1["fields"], {"name": "unit", "type": "string", "default": "C"}],
}
READING_CLASHING = {  # `value` is a string here: v2 cannot read it
    **READING_V1,
    "fields": [{"name": "id", "type": "string"}, {"name": "value", "type": "string"}],
}
FIRST_ID = 0x01020304  # every header byte differs, so byte order shows


class MemoryRegistry:
    """The `Registry` protocol in memory, with a switch that makes it unreachable."""

    url = "memory://registry"

    def __init__(self) -> None:
        self.by_id: dict[int, RegistrySchema] = {}
        self.subjects: dict[str, list[int]] = {}
        self.down = False
        self.refusing = False  # answering 403: reachable, but not to us
        self.lookups = 0
        self._next_id = FIRST_ID

    def add(
        self, subject: str, schema_type: str, text: str, *, schema_id: int | None = None
    ) -> int:
        """``text`` under ``subject`` (its id if it is there already); ``schema_id`` picks
        the id of a new one."""
        for known in self.subjects.get(subject, []):
            if self.by_id[known].text == text:
                return known
        if schema_id is None:
            schema_id = self._next_id
            self._next_id += 1
        versions = self.subjects.setdefault(subject, [])
        versions.append(schema_id)
        self.by_id[schema_id] = RegistrySchema(schema_id, schema_type, text, version=len(versions))
        return schema_id

    def schema_by_id(self, schema_id: int) -> RegistrySchema:
        self._reachable()
        self.lookups += 1
        if schema_id not in self.by_id:
            raise UnknownSchemaId(f"schema id {schema_id}: not found")
        return self.by_id[schema_id]

    def id_for(self, subject: str, schema_type: str, text: str, *, register: bool) -> int:
        self._reachable()
        for schema_id in self.subjects.get(subject, []):
            if self.by_id[schema_id].text == text:
                return schema_id
        if not register:
            raise SchemaNotRegistered(f"not registered under {subject}")
        return self.add(subject, schema_type, text)

    def latest(self, subject: str) -> RegistrySchema | None:
        self._reachable()
        ids = self.subjects.get(subject)
        return self.by_id[ids[-1]] if ids else None

    def versions(self, subject: str) -> list[RegistrySchema]:
        self._reachable()
        return [self.by_id[i] for i in self.subjects.get(subject, [])]

    def compatible(self, subject: str, schema_type: str, text: str) -> list[str]:
        self._reachable()
        return []

    def _reachable(self) -> None:
        if self.down:
            raise RegistryUnavailable("schema registry: connection refused")
        if self.refusing:
            raise RegistryRefused("schema registry: 403 Forbidden")


@pytest.fixture
def registry() -> MemoryRegistry:
    return MemoryRegistry()


def avro_body(doc: dict[str, Any], value: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(doc), value)
    return buf.getvalue()


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def avro_codec(
    schema: Schema, registry: MemoryRegistry, *, register: bool = True
) -> RegistryAvroCodec:
    return RegistryAvroCodec(schema, registry, subject=SUBJECT, register=register)


# -- avro-registry ------------------------------------------------------------


def test_avro_registry_round_trip_with_a_big_endian_id_header(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    schema = make_schema(READING_V1)
    codec = avro_codec(schema, registry)
    value = {"id": "r1", "value": 21.5}

    data = codec.encode(value)

    assert codec.schema_id == FIRST_ID
    assert data[:5] == b"\x00\x01\x02\x03\x04"
    assert data[5:] == avro_body(READING_V1, value)
    assert schema_id_of(data) == FIRST_ID
    assert codec.decode(data) == value
    assert registry.subjects[SUBJECT] == [FIRST_ID]
    registered = make_schema(json.loads(registry.by_id[FIRST_ID].text))
    assert registered.fingerprint == schema.fingerprint
    assert registry.lookups == 0  # our own id needs no lookup to decode


def test_prepare_without_register_needs_the_schema_already_there(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    schema = make_schema(READING_V1)
    with pytest.raises(SchemaNotRegistered):
        avro_codec(schema, registry, register=False).prepare()
    schema_id = registry.add(SUBJECT, "AVRO", registry_text(schema, "AVRO"))
    assert avro_codec(schema, registry, register=False).prepare() == schema_id


def test_an_older_compatible_writer_is_resolved_with_the_readers_defaults(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    v1_id = registry.add(SUBJECT, "AVRO", json.dumps(READING_V1))
    codec = avro_codec(make_schema(READING_V2), registry)
    old = framed(v1_id, avro_body(READING_V1, {"id": "r1", "value": 3.0}))

    assert codec.decode(old) == {"id": "r1", "value": 3.0, "unit": "C"}
    assert codec.decode(old) == {"id": "r1", "value": 3.0, "unit": "C"}
    assert registry.lookups == 1  # the writer schema is looked up once, then cached


def test_an_incompatible_writer_is_refused_with_the_reasons_once(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    bad_id = registry.add(SUBJECT, "AVRO", json.dumps(READING_CLASHING))
    codec = avro_codec(make_schema(READING_V2), registry)
    data = framed(bad_id, avro_body(READING_CLASHING, {"id": "r1", "value": "hot"}))

    for _ in range(3):
        with pytest.raises(DecodeError) as refused:
            codec.decode(data)
        message = str(refused.value)
        # what a dead letter says: a new writer schema, which one, and why it cannot be read
        assert message.startswith(
            f"a new writer schema (tests.registry.Reading, version 1 of subject {SUBJECT}, "
            f"schema id {bad_id}), which tests.registry.Reading cannot read: "
        ), message
        assert "value" in message  # the field whose type changed
        # and which schema, as data: what status counts a burst of dead letters by
        assert isinstance(refused.value, UnreadableWriterSchema)
        writer = refused.value.writer
        assert (writer.subject, writer.version, writer.schema_id) == (SUBJECT, 1, bad_id)
        assert writer.writer == "tests.registry.Reading"
        assert writer.problems and all("value" in p for p in writer.problems), writer
    assert registry.lookups == 1


def test_an_unknown_schema_id_is_a_decode_error(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    codec = avro_codec(make_schema(READING_V1), registry)
    with pytest.raises(DecodeError, match=r"schema id 4242 is not in the registry at memory://"):
        codec.decode(framed(4242, avro_body(READING_V1, {"id": "r1", "value": 1.0})))


def test_a_json_schema_id_on_an_avro_topic_is_a_decode_error(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    schema = make_schema(READING_V1)
    json_id = registry.add("other-value", "JSON", registry_text(schema, "JSON"))
    codec = avro_codec(schema, registry)
    with pytest.raises(DecodeError, match=r"is a JSON schema; this topic's format needs AVRO"):
        codec.decode(framed(json_id, b'{"id":"r1","value":1.0}'))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", r"not in the schema registry wire format .* got empty"),
        (b"\x00\x00\x01", r"not in the schema registry wire format .* got 00 00 01"),
        (b"\xc3\x01" + bytes(12), r"expected byte 00 .* got c3 01 00 00 00"),
        (b"\x01\x00\x00\x00\x01\x02", r"not in the schema registry wire format"),
    ],
    ids=["empty", "short-header", "single-object-magic", "wrong-magic"],
)
def test_bytes_that_are_not_registry_framed_are_decode_errors(
    registry: MemoryRegistry,
    make_schema: Callable[[dict[str, Any]], Schema],
    data: bytes,
    expected: str,
) -> None:
    codec = avro_codec(make_schema(READING_V1), registry)
    codec.prepare()
    with pytest.raises(DecodeError, match=expected):
        codec.decode(data)
    assert registry.lookups == 0


def test_a_truncated_body_is_a_decode_error_naming_the_id(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    codec = avro_codec(make_schema(READING_V1), registry)
    whole = codec.encode({"id": "reading-1", "value": 1.0})
    with pytest.raises(DecodeError, match=rf"schema id {FIRST_ID}\): the record is truncated"):
        codec.decode(whole[:-3])
    with pytest.raises(DecodeError, match=r"2 trailing bytes"):
        codec.decode(whole + b"\x00\x00")


def test_an_unreachable_registry_propagates_and_the_id_is_not_remembered_as_bad(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    v1_id = registry.add(SUBJECT, "AVRO", json.dumps(READING_V1))
    codec = avro_codec(make_schema(READING_V2), registry)
    data = framed(v1_id, avro_body(READING_V1, {"id": "r1", "value": 2.0}))

    registry.down = True
    for _ in range(2):
        with pytest.raises(RegistryUnavailable):  # not DecodeError: not a dead letter
            codec.decode(data)
    registry.down = False

    assert codec.decode(data) == {"id": "r1", "value": 2.0, "unit": "C"}


def test_an_unreachable_registry_at_prepare_is_retried_later(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    codec = avro_codec(make_schema(READING_V1), registry)
    registry.down = True
    with pytest.raises(RegistryUnavailable):
        codec.prepare()
    registry.down = False
    assert codec.encode({"id": "r1", "value": 1.0})[:5] == framed(FIRST_ID, b"")


def test_avro_encode_refuses_a_value_that_does_not_match(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    codec = avro_codec(make_schema(READING_V1), registry)
    with pytest.raises(EncodeError, match="value"):
        codec.encode({"id": "r1", "value": "not a number"})


# -- json-registry ------------------------------------------------------------


def json_codec(
    schema: Schema, registry: MemoryRegistry, *, register: bool = True
) -> RegistryJsonCodec:
    return RegistryJsonCodec(schema, registry, subject=SUBJECT, register=register)


def test_json_registry_round_trip_registers_a_json_schema(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    schema = make_schema(READING_V2)
    codec = json_codec(schema, registry)

    data = codec.encode({"id": "r1", "value": 4.0, "unit": "K"})

    assert data[:5] == b"\x00\x01\x02\x03\x04"
    assert json.loads(data[5:]) == {"id": "r1", "value": 4.0, "unit": "K"}
    registered = registry.by_id[FIRST_ID]
    assert registered.schema_type == "JSON"
    assert json.loads(registered.text) == json_schemas.from_avro(schema)
    assert codec.decode(data) == {"id": "r1", "value": 4.0, "unit": "K"}
    # a document that leaves out a field with a default gets the default, as Avro would
    assert codec.decode(framed(FIRST_ID, b'{"id":"r2","value":1}')) == {
        "id": "r2",
        "value": 1.0,
        "unit": "C",
    }


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"id":"r1"}', r"not a valid tests\.registry\.Reading: .*value"),
        (b'{"id":"r1","value":"hot"}', r"not a valid tests\.registry\.Reading: .*value"),
        (b"[1, 2]", r"expected a JSON object"),
        (b'{"id": ', r"not valid JSON"),
    ],
    ids=["missing-field", "wrong-type", "not-an-object", "not-json"],
)
def test_json_registry_decode_validates_against_the_ports_schema(
    registry: MemoryRegistry,
    make_schema: Callable[[dict[str, Any]], Schema],
    body: bytes,
    expected: str,
) -> None:
    codec = json_codec(make_schema(READING_V1), registry)
    codec.prepare()
    with pytest.raises(DecodeError, match=expected):
        codec.decode(framed(FIRST_ID, body))


def test_json_registry_decode_refuses_unknown_and_avro_ids_and_bad_framing(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    schema = make_schema(READING_V1)
    avro_id = registry.add("other-value", "AVRO", registry_text(schema, "AVRO"))
    codec = json_codec(schema, registry)
    document = b'{"id":"r1","value":1.0}'
    with pytest.raises(DecodeError, match=r"is a AVRO schema; this topic's format needs JSON"):
        codec.decode(framed(avro_id, document))
    with pytest.raises(DecodeError, match=r"schema id 77 is not in the registry"):
        codec.decode(framed(77, document))
    with pytest.raises(DecodeError, match=r"before the JSON body, got 7b 22 69 64 22"):
        codec.decode(document)


def test_json_registry_unreachable_registry_propagates_and_is_retried(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    schema = make_schema(READING_V1)
    writer_id = registry.add(SUBJECT, "JSON", registry_text(schema, "JSON"))
    codec = json_codec(schema, registry)
    data = framed(writer_id, b'{"id":"r1","value":1.0}')
    registry.down = True
    with pytest.raises(RegistryUnavailable):
        codec.decode(data)
    registry.down = False
    assert codec.decode(data) == {"id": "r1", "value": 1.0}


def test_json_encoders_refuse_an_invalid_value(
    registry: MemoryRegistry, make_schema: Callable[[dict[str, Any]], Schema]
) -> None:
    schema = make_schema(READING_V1)
    for codec in (JsonTopicCodec(schema), json_codec(schema, registry)):
        with pytest.raises(EncodeError, match=r"does not match tests\.registry\.Reading"):
            codec.encode({"id": "r1", "value": "hot"})
        with pytest.raises(EncodeError, match=r"value"):
            codec.encode({"id": "r1"})


# -- the JSON Schema made from an Avro schema ----------------------------------------

RICH = {
    "type": "record",
    "name": "Order",
    "namespace": "tests.registry",
    "doc": "An order, with most kinds of Avro type",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "long"},
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
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {
            "name": "status",
            "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]},
        },
        {"name": "referrer", "type": ["null", "tests.registry.Customer"], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
ORDER = {
    "id": "o1",
    "count": 3,
    "payload": b"\x00\xffbinary",
    "at": dt.datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=dt.UTC),
    "customer": {"name": "Ada", "email": None},
    "lines": [1.5, 2.0],
    "attributes": {"channel": "web"},
    "status": "PAID",
    "referrer": {"name": "Bob", "email": "bob@example.com"},
    "note": None,
}


def validator_for(schema: Schema) -> Any:
    document = json_schemas.from_avro(schema)
    jsonschema_lib.Draft7Validator.check_schema(document)
    return jsonschema_lib.Draft7Validator(
        document, format_checker=jsonschema_lib.Draft7Validator.FORMAT_CHECKER
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"referrer": None, "customer": {"name": "Ada"}},  # null branch; a defaulted field left out
        {"lines": [], "attributes": {}},
        {"at": 1_795_000_000_000},  # a timestamp given as epoch milliseconds, as fastavro allows
    ],
    ids=["full", "nulls-and-defaults", "empty-collections", "epoch-millis"],
)
def test_the_json_schema_accepts_what_the_json_codecs_write(
    registry: MemoryRegistry,
    make_schema: Callable[[dict[str, Any]], Schema],
    changes: dict[str, Any],
) -> None:
    schema = make_schema(RICH)
    validator = validator_for(schema)
    value = {**ORDER, **changes}
    plain = JsonTopicCodec(schema).encode(value)
    framed_body = json_codec(schema, registry).encode(value)[5:]
    for body in (plain, framed_body):
        document = json.loads(body)
        errors = [e.message for e in validator.iter_errors(document)]
        assert errors == [], document


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.pop("count"), "'count' is a required property"),
        (lambda d: d["customer"].pop("name"), "'name' is a required property"),
        (lambda d: d.update(status="LOST"), "'LOST' is not one of"),
        (lambda d: d.update(count="3"), "'3' is not of type 'integer'"),
        (lambda d: d.update(lines=["x"]), "'x' is not of type 'number'"),
        (lambda d: d.update(attributes={"k": 1}), "1 is not of type 'string'"),
        (lambda d: d.update(extra=True), "Additional properties are not allowed"),
        (lambda d: d.update(at=1.5), "1.5 is not of type 'string', 'integer'"),
    ],
    ids=[
        "missing-required",
        "nested-missing",
        "enum",
        "long",
        "array",
        "map",
        "additional",
        "timestamp",
    ],
)
def test_the_json_schema_rejects_documents_the_port_would_not_accept(
    make_schema: Callable[[dict[str, Any]], Schema],
    change: Callable[[dict[str, Any]], Any],
    expected: str,
) -> None:
    schema = make_schema(RICH)
    document = json.loads(JsonTopicCodec(schema).encode(ORDER))
    change(document)
    errors = [e.message for e in validator_for(schema).iter_errors(document)]
    assert any(expected in e for e in errors), errors


def test_the_json_schema_names_each_type_once_and_describes_the_record(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    document = json_schemas.from_avro(make_schema(RICH))
    assert document["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert document["$ref"] == "#/definitions/tests.registry.Order"
    assert set(document["definitions"]) == {
        "tests.registry.Order",
        "tests.registry.Customer",
        "tests.registry.Status",
    }
    order = document["definitions"]["tests.registry.Order"]
    assert order["description"] == RICH["doc"]
    assert order["required"] == [
        "id",
        "count",
        "payload",
        "at",
        "customer",
        "lines",
        "attributes",
        "status",
    ]
