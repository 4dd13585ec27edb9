"""The columnar codec beside the per-record ones: made from them, and columns without bytes.

``ColumnCodec.for_codec`` must read and write what the per-record codec of a
port does (same records, same reasons, one registry cache), and
``Columns.from_records`` / ``records_of`` must give what a decode gives.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import fastavro
import numpy as np
import pytest

from streamflow.schema import JsonCodec, SchemaStore, SingleObjectCodec
from streamflow.schema.bounds import DecodeLimits
from streamflow.schema.codecs import DecodeError, EncodeError, JsonTopicCodec
from streamflow.schema.columns import ColumnCodec, Columns, records_of
from streamflow.schema.registry import (
    RegistryRefused,
    RegistryUnavailable,
    registry_text,
)
from streamflow.schema.registry_codecs import RegistryAvroCodec, RegistryJsonCodec
from tests.schema.test_registry_codecs import (
    READING_CLASHING,
    READING_V1,
    READING_V2,
    SUBJECT,
    MemoryRegistry,
    framed,
)

LIMITS = DecodeLimits(max_items=10, max_record_bytes=4096, max_batch_bytes=8192)
UTC = dt.UTC


def fastavro_text(doc: dict[str, Any]) -> str:
    store = SchemaStore(include_builtin=False)
    return registry_text(store.get(store.add_schema(doc)[-1]), "AVRO")


def body(doc: dict[str, Any], record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(doc), record)
    return buf.getvalue()


def per_record(codec: Any, values: list[bytes]) -> tuple[list[Any], list[tuple[int, str]]]:
    """What a per-record codec makes of a batch: the records, and why the others failed."""
    records, errors = [], []
    for i, value in enumerate(values):
        try:
            records.append(codec.decode(value))
        except DecodeError as exc:
            errors.append((i, str(exc)))
    return records, errors


# -- for_codec -----------------------------------------------------------------


def test_a_single_object_codec_gives_its_schema_store_and_limits(
    make_schema: Any, native: bool
) -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(READING_V2)
    store.add_version(READING_V1)  # found by the codec's store alone
    schema = store.get("tests.registry.Reading")
    codec = SingleObjectCodec(schema, store=store, limits=LIMITS)

    column = ColumnCodec.for_codec(codec, native=native)

    assert column is not None and column.native is native
    assert (column.wire, column.schema, column.limits) == ("single-object", schema, LIMITS)
    values = [
        codec.encode({"id": "a", "value": 1.5, "unit": "K"}),
        SingleObjectCodec(make_schema(READING_V1)).encode({"id": "b", "value": 2.5}),
        b"\xc3\x01" + (12345).to_bytes(8, "little"),
    ]
    got = column.decode(values)
    assert got.rows.tolist() == [0, 1]
    assert got.to_records()[1] == {"id": "b", "value": 2.5, "unit": "C"}
    assert (got.to_records(), got.errors) == per_record(codec, values)


def test_json_codecs_have_no_column_form(make_schema: Any) -> None:
    schema = make_schema(READING_V1)
    registry = MemoryRegistry()
    for codec in (
        JsonCodec(schema),
        JsonTopicCodec(schema),
        RegistryJsonCodec(schema, registry, subject=SUBJECT, register=False),
    ):
        assert ColumnCodec.for_codec(codec) is None


def test_a_registry_codec_shares_its_lookups_and_reasons(make_schema: Any, native: bool) -> None:
    registry = MemoryRegistry()
    v1, clashing = (
        registry.add(SUBJECT, "AVRO", fastavro_text(READING_V1), schema_id=7),
        registry.add(SUBJECT, "AVRO", fastavro_text(READING_CLASHING), schema_id=8),
    )
    reader = make_schema(READING_V2)
    codec = RegistryAvroCodec(reader, registry, subject=SUBJECT, register=False, limits=LIMITS)

    column = ColumnCodec.for_codec(codec, native=native)

    assert column is not None and column.native is native
    assert (column.wire, column.schema, column.limits) == ("registry", reader, LIMITS)
    assert column.schema_id is None  # a consuming codec never learns its own id
    values = [
        framed(v1, body(READING_V1, {"id": "a", "value": 1.5})),
        framed(9, body(READING_V1, {"id": "b", "value": 2.5})),  # an id nobody registered
        framed(clashing, body(READING_CLASHING, {"id": "c", "value": "x"})),
        framed(v1, body(READING_V1, {"id": "d", "value": 3.5})),
    ]
    got = column.decode(values)
    assert registry.lookups == 3  # one a writer id, whatever the batch holds
    assert got.rows.tolist() == [0, 3]
    assert got.to_records() == [
        {"id": "a", "value": 1.5, "unit": "C"},
        {"id": "d", "value": 3.5, "unit": "C"},
    ]
    assert (got.to_records(), got.errors) == per_record(codec, values)
    assert registry.lookups == 3  # the per-record codec found every id in the shared cache
    assert "version 2 of subject readings-value" in got.errors[1][1]


def test_a_registry_column_codec_takes_the_id_once_the_codec_has_it(
    make_schema: Any, native: bool
) -> None:
    registry = MemoryRegistry()
    schema = make_schema(READING_V1)
    codec = RegistryAvroCodec(schema, registry, subject=SUBJECT, register=True)
    column = ColumnCodec.for_codec(codec, native=native)
    assert column is not None and column.schema_id is None
    with pytest.raises(ValueError, match="needs schema_id"):
        column.encode({"id": ["a"], "value": np.array([1.0])}, 1)

    schema_id = codec.prepare()  # what the runtime does for a producing port, at start-up

    assert column.schema_id == schema_id
    values, errors = column.encode({"id": ["a"], "value": np.array([1.0])}, 1)
    assert errors == [] and values == [codec.encode({"id": "a", "value": 1.0})]
    assert column.decode(values).to_records() == [{"id": "a", "value": 1.0}]
    assert registry.lookups == 0  # our own id is known: no lookup, here or in the codec


@pytest.mark.parametrize("failure", [RegistryUnavailable, RegistryRefused])
def test_a_registry_that_cannot_be_reached_holds_the_batch_back(
    make_schema: Any, native: bool, failure: type[Exception]
) -> None:
    """Down, or refusing us (401, 403): the records are fine, so none is a dead letter."""
    registry = MemoryRegistry()
    v1 = registry.add(SUBJECT, "AVRO", fastavro_text(READING_V1), schema_id=7)
    codec = RegistryAvroCodec(make_schema(READING_V1), registry, subject=SUBJECT, register=False)
    column = ColumnCodec.for_codec(codec, native=native)
    assert column is not None
    values = [framed(v1, body(READING_V1, {"id": "a", "value": 1.5}))]
    registry.down, registry.refusing = failure is RegistryUnavailable, failure is RegistryRefused

    with pytest.raises(failure):  # not a dead letter: the batch is retried
        column.decode(values)

    registry.refusing = False
    registry.down = False
    got = column.decode(values)
    assert got.errors == [] and got.to_records() == [{"id": "a", "value": 1.5}]


# -- columns without bytes -----------------------------------------------------

EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "tests.columns",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "score", "type": ["null", "double"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "float"}}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {
            "name": "where",
            "type": {
                "type": "record",
                "name": "Where",
                "fields": [{"name": "x", "type": "int"}, {"name": "name", "type": "string"}],
            },
        },
    ],
}


def events(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"e{i}",
            "score": None if i % 3 == 0 else i / 4,
            "at": dt.datetime(2024, 5, 1, 12, i, tzinfo=UTC),
            "day": None if i % 2 else dt.date(2024, 5, 1 + i),
            "grid": [[float(i), 0.5], [1.0, 2.0]],
            "tags": ["t"] * i,
            "where": {"x": i, "name": f"w{i}"},
        }
        for i in range(n)
    ]


def assert_same_columns(got: Columns, want: Columns) -> None:
    assert got.columns.keys() == want.columns.keys()
    for name, column in got.columns.items():
        other = want.columns[name]
        assert type(column) is type(other), name
        assert (column.dtype, column.shape) == (other.dtype, other.shape), name
        if isinstance(column, np.ma.MaskedArray):
            assert np.array_equal(np.ma.getmaskarray(column), np.ma.getmaskarray(other)), name
        if column.dtype != object:
            assert np.array_equal(np.asarray(column), np.asarray(other)), name
    assert got.to_records() == want.to_records()
    assert (got.rows.tolist(), got.errors) == (want.rows.tolist(), want.errors)


def test_from_records_gives_the_columns_a_decode_gives(make_schema: Any, native: bool) -> None:
    schema = make_schema(EVENT)
    records = events(5)
    values = [body(EVENT, r) for r in records]
    decoded = [fastavro.schemaless_reader(io.BytesIO(v), schema.parsed, None) for v in values]

    got = Columns.from_records(schema, decoded)

    assert_same_columns(got, ColumnCodec(schema, wire="bare", native=native).decode(values))
    assert got.column("grid").shape == (5, 2, 2) and got.column("where.x").dtype == np.int32
    assert got.to_records() == decoded
    assert records_of(schema, got.columns, got.n) == decoded


def test_from_records_keeps_the_batch_places_it_is_given(make_schema: Any) -> None:
    schema = make_schema(EVENT)
    records = events(3)
    values = [body(EVENT, r) for r in records]
    decoded = ColumnCodec(schema, wire="bare").decode([values[0], b"\x01", values[2]])

    got = Columns.from_records(schema, [records[0], records[2]], rows=[0, 2], errors=decoded.errors)

    assert got.n == 2 and got.rows.dtype == np.int64
    assert_same_columns(got, decoded)
    with pytest.raises(ValueError, match="2 records need as many rows"):
        Columns.from_records(schema, records[:2], rows=[0])


def test_records_of_encodes_through_a_per_record_codec(make_schema: Any) -> None:
    schema = make_schema(EVENT)
    records = events(4)
    codec = SingleObjectCodec(schema)
    cols = Columns.from_records(schema, records)

    rebuilt = records_of(schema, cols.columns, cols.n)

    assert [codec.encode(r) for r in rebuilt] == [codec.encode(r) for r in records]
    whole = {k: v for k, v in cols.columns.items() if not k.startswith("where.")}
    whole["where"] = [r["where"] for r in records]  # a nested record given as one column
    assert records_of(schema, whole, 4) == rebuilt
    # a field with no column is left out: the codec writes its default, or names it
    with pytest.raises(EncodeError, match="at: missing required field"):
        codec.encode(records_of(schema, {k: v for k, v in whole.items() if k != "at"}, 4)[0])
    reading = make_schema(READING_V2)
    [record] = records_of(reading, {"id": ["a"], "value": np.array([1.0])}, 1)
    assert record == {"id": "a", "value": 1.0}
    assert SingleObjectCodec(reading).decode(SingleObjectCodec(reading).encode(record)) == {
        **record,
        "unit": "C",
    }
