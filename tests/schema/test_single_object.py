"""Avro single-object encoding, checked against the Apache Avro reference implementation.

The ``avro`` package is the reference: its fingerprints, encoder and decoder
must agree with ours byte for byte, in both directions.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import io
import json
import uuid
from collections.abc import Callable
from typing import Any

import avro.io
import avro.schema
import fastavro
import pytest

from streamflow.schema import Schema, SingleObjectCodec, fingerprint64
from streamflow.schema.codecs import MAGIC
from streamflow.schema.fingerprint import canonical_form, fingerprint_bytes

UTC = dt.UTC

INNER = {
    "type": "record",
    "name": "Inner",
    "fields": [
        {"name": "a", "type": "int"},
        {"name": "label", "type": "string", "default": ""},
    ],
}

# (case id, record schema, data to round-trip)
CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
    (
        "nested-records",
        {
            "type": "record",
            "name": "t.Outer",
            "fields": [
                {"name": "id", "type": "string"},
                {
                    "name": "inner",
                    "type": {
                        "type": "record",
                        "name": "Middle",
                        "fields": [
                            {"name": "x", "type": "double"},
                            {
                                "name": "deepest",
                                "type": {
                                    "type": "record",
                                    "name": "Deepest",
                                    "fields": [
                                        {"name": "flag", "type": "boolean"},
                                        {"name": "f", "type": "float"},
                                    ],
                                },
                            },
                        ],
                    },
                },
                {"name": "n", "type": "long"},
            ],
        },
        [{"id": "é-€", "inner": {"x": -1.25, "deepest": {"flag": True, "f": 1.5}}, "n": -(2**62)}],
    ),
    (
        "enums",
        {
            "type": "record",
            "name": "t.Paint",
            "fields": [
                {
                    "name": "color",
                    "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]},
                },
                {"name": "others", "type": {"type": "array", "items": "Color"}},
            ],
        },
        [{"color": "BLUE", "others": ["RED", "RED", "GREEN"]}],
    ),
    (
        "union-null-record",
        {
            "type": "record",
            "name": "t.Maybe",
            "fields": [{"name": "inner", "type": ["null", INNER], "default": None}],
        },
        [{"inner": None}, {"inner": {"a": 7, "label": "seven"}}],
    ),
    (
        "union-null-string",
        {
            "type": "record",
            "name": "t.Note",
            "fields": [{"name": "text", "type": ["null", "string"]}],
        },
        [{"text": None}, {"text": ""}, {"text": "hello"}],
    ),
    (
        "union-multi-branch",
        {
            "type": "record",
            "name": "t.Any",
            "fields": [{"name": "v", "type": ["null", "string", "long", "double", INNER]}],
        },
        [{"v": None}, {"v": "s"}, {"v": 2**40}, {"v": 0.5}, {"v": {"a": 1, "label": "x"}}],
    ),
    (
        "arrays",
        {
            "type": "record",
            "name": "t.Lists",
            "fields": [
                {"name": "longs", "type": {"type": "array", "items": "long"}},
                {"name": "records", "type": {"type": "array", "items": INNER}},
                {
                    "name": "nested",
                    "type": {"type": "array", "items": {"type": "array", "items": "string"}},
                },
            ],
        },
        [
            {"longs": [], "records": [], "nested": []},
            {
                "longs": [1, -1, 2**33],
                "records": [{"a": 1, "label": ""}, {"a": 2, "label": "b"}],
                "nested": [["a"], [], ["b", "c"]],
            },
        ],
    ),
    (
        "maps",
        {
            "type": "record",
            "name": "t.Maps",
            "fields": [
                {"name": "tags", "type": {"type": "map", "values": "string"}},
                {
                    "name": "series",
                    "type": {"type": "map", "values": {"type": "array", "items": "int"}},
                },
            ],
        },
        [{"tags": {}, "series": {}}, {"tags": {"k": "v", "ü": ""}, "series": {"a": [1, 2]}}],
    ),
    (
        "bytes-and-fixed",
        {
            "type": "record",
            "name": "t.Blobs",
            "fields": [
                {"name": "raw", "type": "bytes"},
                {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
                {"name": "maybe", "type": ["null", "bytes"]},
            ],
        },
        [
            {"raw": b"", "digest": b"\x00\x01\xfe\xff", "maybe": None},
            {"raw": bytes(range(256)), "digest": b"abcd", "maybe": b"\x00"},
        ],
    ),
    (
        "logical-types",
        {
            "type": "record",
            "name": "t.Logical",
            "fields": [
                {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                {"name": "day", "type": {"type": "int", "logicalType": "date"}},
                {
                    "name": "price",
                    "type": {
                        "type": "bytes",
                        "logicalType": "decimal",
                        "precision": 12,
                        "scale": 3,
                    },
                },
                {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
                {
                    "name": "when",
                    "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
                },
            ],
        },
        [
            {
                "ts_ms": dt.datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC),
                "ts_us": dt.datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC),
                "day": dt.date(2024, 2, 29),
                "price": decimal.Decimal("-1234.500"),
                "id": str(uuid.UUID("12345678-1234-5678-1234-567812345678")),
                "when": None,
            },
            {
                "ts_ms": dt.datetime(1970, 1, 1, tzinfo=UTC),
                "ts_us": dt.datetime(2038, 1, 19, 3, 14, 8, 1, tzinfo=UTC),
                "day": dt.date(1900, 1, 1),
                "price": decimal.Decimal("0.001"),
                "id": str(uuid.UUID(int=0)),
                "when": dt.datetime(2024, 1, 1, 12, tzinfo=UTC),
            },
        ],
    ),
]

PARAMS = [
    pytest.param(schema, datum, id=f"{case}-{i}")
    for case, schema, data in CASES
    for i, datum in enumerate(data)
]

# An int fits both the long and the double branch of ["null", "string", "long", "double", ...].
# The reference Python writer picks the *last* branch that validates (double), fastavro and
# Java the first (long); both encodings are valid and decode to the same value, so only the
# bytes differ.
AMBIGUOUS_BRANCH = {"v": 2**40}


def _reference(schema: Schema) -> avro.schema.Schema:
    return avro.schema.parse(json.dumps(schema.raw))


def _reference_encode(schema: Schema, datum: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    avro.io.DatumWriter(_reference(schema)).write(datum, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def _reference_decode(schema: Schema, body: bytes) -> Any:
    reader = avro.io.DatumReader(_reference(schema))
    return reader.read(avro.io.BinaryDecoder(io.BytesIO(body)))


def _comparable(value: Any) -> Any:
    """fastavro gives uuid.UUID where the reference gives str; nothing else differs."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return str(value) if isinstance(value, uuid.UUID) else value


def _without_logical_types(node: Any) -> Any:
    """What the spec's Parsing Canonical Form keeps of a schema: no logicalType attributes."""
    if isinstance(node, list):
        return [_without_logical_types(n) for n in node]
    if not isinstance(node, dict):
        return node
    if "logicalType" in node:
        return node["type"]
    out = dict(node)
    for key in ("items", "values"):
        if key in out:
            out[key] = _without_logical_types(out[key])
    if "fields" in out:
        out["fields"] = [{**f, "type": _without_logical_types(f["type"])} for f in out["fields"]]
    if isinstance(out.get("type"), dict | list):
        out["type"] = _without_logical_types(out["type"])
    return out


def _reference_fingerprint(schema: Schema) -> bytes:
    # The avro package's canonical form keeps logical types as {"type": "long"} where the
    # specification (and Java, and fastavro) reduce them to "long", so its fingerprint of a
    # schema with logical types deviates from every other implementation. We compare with
    # the reference on the schema without its logicalType attributes, which is exactly the
    # spec's canonical form. test_reference_canonical_form_deviates_for_logical_types pins
    # the deviation down.
    bare = json.dumps(_without_logical_types(schema.raw))
    return bytes(avro.schema.parse(bare).fingerprint("CRC-64-AVRO"))


def test_the_fingerprint_of_null_is_the_spec_vector() -> None:
    null = fastavro.parse_schema("null")
    assert fingerprint64(null) == 0x63DD24E7CC258F8A
    assert fingerprint_bytes(null) == bytes.fromhex("8a8f25cce724dd63")  # little-endian
    assert fingerprint_bytes(null) == bytes(avro.schema.parse('"null"').fingerprint("CRC-64-AVRO"))


@pytest.mark.parametrize(("case", "doc"), [(c, s) for c, s, _ in CASES if c != "logical-types"])
def test_fingerprint_equals_the_reference_implementation(
    make_schema: Callable[[dict[str, Any]], Schema], case: str, doc: dict[str, Any]
) -> None:
    schema = make_schema(doc)
    reference = bytes(_reference(schema).fingerprint("CRC-64-AVRO"))
    assert SingleObjectCodec(schema).header == MAGIC + reference
    assert schema.fingerprint == int.from_bytes(reference, "little")
    assert schema.fingerprint_hex == f"{int.from_bytes(reference, 'little'):016x}"


def test_reference_canonical_form_deviates_for_logical_types(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    schema = make_schema(
        {
            "type": "record",
            "name": "t.Ts",
            "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
        }
    )
    assert canonical_form(schema.parsed) == (
        '{"name":"t.Ts","type":"record","fields":[{"name":"at","type":"long"}]}'
    )
    assert '"type":{"type":"long"}' in _reference(schema).canonical_form
    assert SingleObjectCodec(schema).header[2:] == _reference_fingerprint(schema)


def test_the_header_is_the_marker_and_the_fingerprint(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    schema = make_schema(CASES[3][1])
    data = SingleObjectCodec(schema).encode({"text": "x"})
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == schema.fingerprint.to_bytes(8, "little")
    assert data[10:] == b"\x02\x02x"


@pytest.mark.parametrize(("doc", "datum"), PARAMS)
def test_ours_encode_and_the_reference_decodes(
    make_schema: Callable[[dict[str, Any]], Schema], doc: dict[str, Any], datum: dict[str, Any]
) -> None:
    schema = make_schema(doc)
    data = SingleObjectCodec(schema).encode(copy.deepcopy(datum))
    assert data[:2] == MAGIC
    assert data[2:10] == _reference_fingerprint(schema)
    assert _comparable(_reference_decode(schema, data[10:])) == datum
    if datum != AMBIGUOUS_BRANCH:
        assert data[10:] == _reference_encode(schema, datum)  # byte for byte


@pytest.mark.parametrize(("doc", "datum"), PARAMS)
def test_the_reference_encodes_and_ours_decode(
    make_schema: Callable[[dict[str, Any]], Schema], doc: dict[str, Any], datum: dict[str, Any]
) -> None:
    schema = make_schema(doc)
    codec = SingleObjectCodec(schema)
    data = MAGIC + _reference_fingerprint(schema) + _reference_encode(schema, datum)
    assert _comparable(codec.decode(data)) == datum
