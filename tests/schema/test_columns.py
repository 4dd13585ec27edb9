"""The columnar codec on the shipped schemas, with other writers, and on bad records.

Each test runs twice: on the native path and on the forced fastavro fallback,
which must give the same columns, the same records and the same reasons.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import logging
import uuid
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest

from streamflow.schema import Schema, SchemaStore, SingleObjectCodec, columns
from streamflow.schema.columns import ColumnCodec
from tests.schema.avro_support import bare

SCHEMAS = Path(__file__).parents[2] / "schemas"
UTC = dt.UTC


@pytest.fixture(scope="module")
def store() -> SchemaStore:
    return SchemaStore([SCHEMAS])


def wine_records(n: int) -> list[dict[str, Any]]:
    fields = [
        "fixed_acidity",
        "volatile_acidity",
        "citric_acid",
        "residual_sugar",
        "chlorides",
        "free_sulfur_dioxide",
        "total_sulfur_dioxide",
        "density",
        "pH",
        "sulphates",
        "alcohol",
    ]
    rng = np.random.default_rng(7)
    return [
        {
            "id": f"wine-{i}",
            **{f: float(rng.random() * 10) for f in fields},
            "quality": None if i % 4 == 0 else int(i % 10),
        }
        for i in range(n)
    ]


def test_wine_decodes_into_typed_columns(store: SchemaStore, native: bool) -> None:
    schema = store.get("examples.wine.WineSample")
    records = wine_records(50)
    values = [SingleObjectCodec(schema).encode(r) for r in records]
    codec = ColumnCodec(schema, wire="single-object", store=store, native=native)
    assert codec.native is native

    got = codec.decode(values)

    assert got.n == 50 and got.errors == [] and got.rows.tolist() == list(range(50))
    assert got.column("alcohol").dtype == np.float64
    assert got.column("id").dtype == object and got.column("id")[3] == "wine-3"
    quality = got.column("quality")
    assert isinstance(quality, np.ma.MaskedArray) and quality.dtype == np.int32
    assert quality.mask.tolist() == [i % 4 == 0 for i in range(50)]
    assert got.to_records() == records
    assert codec.encode(got.columns, got.n) == (values, [])


def test_digit_images_decode_as_one_float_array(store: SchemaStore, native: bool) -> None:
    schema = store.get("examples.digits.DigitImage")
    images = np.random.default_rng(1).random((20, 8, 8, 1)).astype(np.float32)
    records = [
        {"id": f"digit-{i}", "pixels": images[i].tolist(), "label": i % 10} for i in range(20)
    ]
    values = [SingleObjectCodec(schema).encode(r) for r in records]
    codec = ColumnCodec(schema, wire="single-object", native=native)

    got = codec.decode(values)

    pixels = got.column("pixels")
    assert type(pixels) is np.ndarray and pixels.shape == (20, 8, 8, 1)
    assert pixels.dtype == np.float32 and np.array_equal(pixels, images)
    assert got.to_records() == records
    assert codec.encode(
        {"id": got.column("id"), "pixels": images, "label": got.column("label")}, 20
    ) == (values, [])


def test_an_8x8_image_and_ragged_arrays(make_schema: Any, native: bool) -> None:
    schema = make_schema(
        {
            "type": "record",
            "name": "Img",
            "fields": [
                {
                    "name": "image",
                    "type": {"type": "array", "items": {"type": "array", "items": "float"}},
                },
                {"name": "sizes", "type": {"type": "array", "items": "long"}},
            ],
        }
    )
    records = [
        {"image": [[float(r * c) for c in range(8)] for r in range(8)], "sizes": [1] * i}
        for i in range(3)
    ]
    codec = ColumnCodec(schema, wire="bare", native=native)
    values = [bare(schema, r) for r in records]

    got = codec.decode(values)

    assert got.column("image").shape == (3, 8, 8)
    sizes = got.column("sizes")  # one shape per record: an array per record
    assert sizes.dtype == object and [s.tolist() for s in sizes] == [[], [1], [1, 1]]
    assert got.to_records() == records
    assert codec.encode(got.columns, 3) == (values, [])


LOGICAL = {
    "type": "record",
    "name": "Event",
    "namespace": "t",
    "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "key", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "when", "type": {"type": "int", "logicalType": "time-millis"}},
        {
            "name": "place",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [
                    {"name": "x", "type": "double"},
                    {
                        "name": "kind",
                        "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]},
                    },
                ],
            },
        },
        {"name": "tags", "type": {"type": "map", "values": "string"}},
    ],
}


def test_logical_types_and_nested_records(make_schema: Any, native: bool) -> None:
    schema = make_schema(LOGICAL)
    records = [
        {
            "at": dt.datetime(2024, 5, 1, 12, 30, i, 123000, tzinfo=UTC),
            "seen": None if i else dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            "day": dt.date(2000 + i, 2, 29 - i),
            "price": decimal.Decimal("12.34") * i,
            "key": uuid.UUID(int=i),
            "when": dt.time(1, 2, 3, 4000),
            "place": {"x": i / 3, "kind": "AB"[i % 2]},
            "tags": {"a": str(i)} if i else {},
        }
        for i in range(3)
    ]
    values = [SingleObjectCodec(schema).encode(r) for r in records]
    codec = ColumnCodec(schema, wire="single-object", native=native)

    got = codec.decode(values)

    assert got.column("at").dtype == np.dtype("datetime64[ms]")
    assert got.column("seen").dtype == np.dtype("datetime64[us]")
    assert got.column("seen").mask.tolist() == [False, True, True]
    assert got.column("day").dtype == np.dtype("datetime64[D]")
    assert isinstance(got.column("price")[1], decimal.Decimal)
    assert got.column("place.kind").tolist() == ["A", "B", "A"]
    expected = [fastavro.schemaless_reader(io.BytesIO(v[10:]), schema.parsed, None) for v in values]
    assert got.to_records() == expected
    assert codec.encode(got.columns, 3) == (values, [])
    assert codec.encode_records(records) == (values, [])


def test_bad_records_fail_alone_with_the_single_object_reasons(
    store: SchemaStore, native: bool
) -> None:
    schema = store.get("examples.wine.WineSample")
    good = [SingleObjectCodec(schema).encode(r) for r in wine_records(3)]
    batch = [
        good[0],
        good[1][:-5],
        b"\xc3\x00" + good[2][2:],
        good[2][:2] + b"\x01" * 8 + b"\x02",
        good[2],
        b"",
        good[0] + b"\x00",
    ]
    codec = ColumnCodec(schema, wire="single-object", store=store, native=native)

    got = codec.decode(batch)

    assert got.rows.tolist() == [0, 4]
    assert got.to_records() == [wine_records(3)[0], wine_records(3)[2]]
    reference = SingleObjectCodec(schema, store=store)
    for index, reason in got.errors:
        with pytest.raises(Exception) as raised:
            reference.decode(batch[index])
        assert reason == str(raised.value), index
    assert [i for i, _ in got.errors] == [1, 2, 3, 5, 6]


V1 = {
    "type": "record",
    "name": "Reading",
    "namespace": "t",
    "fields": [
        {"name": "n", "type": "int"},
        {"name": "label", "type": "string"},
        {"name": "x", "type": "float"},
        {"name": "gone", "type": {"type": "array", "items": "string"}},
        {
            "name": "level",
            "type": {"type": "enum", "name": "Level", "symbols": ["LO", "MID", "HI"]},
        },
        {"name": "maybe", "type": ["null", "int"]},
    ],
}
V2 = {
    "type": "record",
    "name": "Reading",
    "namespace": "t",
    "fields": [
        {
            "name": "level",
            "type": {
                "type": "enum",
                "name": "Level",
                "symbols": ["HI", "LO", "OTHER"],
                "default": "OTHER",
            },
        },
        {"name": "n", "type": "long"},
        {"name": "label", "type": "bytes"},
        {"name": "x", "type": "double"},
        {"name": "maybe", "type": ["null", "long", "string"]},
        {"name": "added", "type": "double", "default": 1.5},
        {"name": "extra", "type": ["null", "string"], "default": None},
    ],
}


def test_older_and_newer_writers_read_like_fastavro(native: bool) -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(V2)
    store.add_version(V1)
    reader = store.get("t.Reading")
    writer = _version(store)
    records = [
        {
            "n": i,
            "label": f"l{i}",
            "x": i / 4,
            "gone": ["a"] * i,
            "level": lvl,
            "maybe": None if i % 2 else i,
        }
        for i, lvl in enumerate(["LO", "MID", "HI"])
    ]
    values = [SingleObjectCodec(writer).encode(r) for r in records]
    own = SingleObjectCodec(reader).encode(
        {"level": "HI", "n": 9, "label": b"z", "x": 0.5, "maybe": "s", "added": 2.0, "extra": "e"}
    )
    codec = ColumnCodec(reader, wire="single-object", store=store, native=native)

    got = codec.decode([*values, own])

    expected = [
        fastavro.schemaless_reader(io.BytesIO(v[10:]), writer.parsed, reader.parsed) for v in values
    ]
    expected.append(SingleObjectCodec(reader).decode(own))
    assert got.errors == [] and got.to_records() == expected
    assert got.column("n").dtype == np.int64 and got.column("level").tolist()[1] == "OTHER"


def _version(store: SchemaStore) -> Schema:
    """The one older version in a store."""
    assert store.problems == []  # which resolves the versions
    (fingerprint,) = store._versions
    found = store.by_fingerprint(fingerprint)
    assert found is not None
    return found


def test_a_writer_the_reader_cannot_read_says_why(native: bool) -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema({**V1, "fields": [*V1["fields"], {"name": "must", "type": "int"}]})
    store.add_version(V1)
    reader = store.get("t.Reading")
    writer = _version(store)
    value = SingleObjectCodec(writer).encode(
        {"n": 1, "label": "a", "x": 1.0, "gone": [], "level": "LO", "maybe": None}
    )
    got = ColumnCodec(reader, wire="single-object", store=store, native=native).decode([value])
    with pytest.raises(Exception) as raised:
        SingleObjectCodec(reader, store=store).decode(value)
    assert got.errors == [(0, str(raised.value))]


def test_registry_wire_with_a_writer_lookup(native: bool) -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(V2)
    store.add_version(V1)
    reader = store.get("t.Reading")
    writer = _version(store)
    record = {"n": 3, "label": "x", "x": 2.5, "gone": [], "level": "LO", "maybe": 4}
    body = bare(writer, record)
    codec = ColumnCodec(
        reader, wire="registry", schema_id=1, native=native, writer_lookup={7: writer}.get
    )

    got = codec.decode([b"\x00\x00\x00\x00\x07" + body, b"\x00\x00\x00\x00\x08" + body, b"\x01"])

    assert got.rows.tolist() == [0]
    assert got.to_records() == [
        fastavro.schemaless_reader(io.BytesIO(body), writer.parsed, reader.parsed)
    ]
    assert got.errors == [
        (1, "schema id 8 is not known to this codec"),
        (
            2,
            "not in the schema registry wire format (expected byte 00 and a 4-byte schema id "
            "before the Avro body, got 01)",
        ),
    ]
    values, errors = codec.encode(got.columns, 1)
    assert errors == [] and (values[0] or b"")[:5] == b"\x00\x00\x00\x00\x01"


def test_encode_fails_a_record_alone_and_names_the_field(make_schema: Any, native: bool) -> None:
    schema = make_schema(
        {
            "type": "record",
            "name": "P",
            "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}],
        }
    )
    codec = ColumnCodec(schema, wire="bare", native=native)
    values, errors = codec.encode({"a": np.array([1, 2**40, 3]), "b": ["x", "y", None]}, 3)
    assert values[0] == bare(schema, {"a": 1, "b": "x"}) and values[1:] == [None, None]
    assert [i for i, _ in errors] == [1, 2]
    assert all(why.startswith("value does not match P") for _, why in errors)
    assert "a" in errors[0][1] and "b" in errors[1][1]
    values, errors = codec.encode({"a": np.array([1])}, 1)  # a missing column
    assert values == [None] and "b" in errors[0][1]


def test_without_the_native_module_it_says_why_once(
    make_schema: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(columns, "_native", None)
    monkeypatch.setattr(columns, "_said", set())
    schema = make_schema({"type": "record", "name": "Q", "fields": [{"name": "a", "type": "int"}]})
    with caplog.at_level(logging.INFO, logger="streamflow.schema"):
        first = ColumnCodec(schema, wire="bare")
        ColumnCodec(schema, wire="bare")
    assert not first.native
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "native module" in caplog.records[0].getMessage()
    assert first.decode([b"\x02"]).to_records() == [{"a": 1}]


def test_a_writer_with_another_logical_type_falls_back_for_its_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if columns._native is None:
        pytest.skip("streamflow._native is not built")
    store = SchemaStore(include_builtin=False)
    ts = {"type": "long", "logicalType": "timestamp-millis"}
    store.add_schema({"type": "record", "name": "E", "fields": [{"name": "t", "type": ts}]})
    # another field too: a logical type is not part of the fingerprint
    store.add_version(
        {
            "type": "record",
            "name": "E",
            "fields": [{"name": "t", "type": "long"}, {"name": "u", "type": "int"}],
        }
    )
    reader = store.get("E")
    writer = _version(store)
    codec = ColumnCodec(reader, wire="single-object", store=store)
    with caplog.at_level(logging.INFO, logger="streamflow.schema"):
        got = codec.decode([SingleObjectCodec(writer).encode({"t": 5, "u": 1})])
    assert got.errors == [] and got.to_records() == [{"t": 5}]  # fastavro's answer: the int
    assert "logical type" in caplog.text
