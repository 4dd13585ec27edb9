"""Properties of the columnar codec on random schemas and records.

For any record schema (primitives, nullable fields, enums, fixed, nested
records, arrays including fixed-shape numeric ones, maps, logical types) and
any records of it: decoding gives fastavro's records, encoding gives
fastavro's bytes, and the two round-trip, on the native path and on the
fallback alike.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import itertools
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamflow.schema import Schema, SchemaStore, SingleObjectCodec, columns
from streamflow.schema.columns import ColumnCodec, Columns, records_of

UTC = dt.UTC
_names = itertools.count()

# (schema, strategy of its values)
Typed = tuple[Any, st.SearchStrategy[Any]]

INT32 = st.integers(-(2**31), 2**31 - 1)
PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "int": INT32,
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
}
MOMENTS = st.datetimes(
    min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(UTC)
)
LOGICAL: list[Typed] = [
    (
        {"type": "long", "logicalType": "timestamp-millis"},
        MOMENTS.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    ),
    ({"type": "long", "logicalType": "timestamp-micros"}, MOMENTS),
    ({"type": "int", "logicalType": "date"}, st.dates()),
    (
        {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 3},
        st.integers(-(10**8) + 1, 10**8 - 1).map(lambda i: decimal.Decimal(i).scaleb(-3)),
    ),
    ({"type": "string", "logicalType": "uuid"}, st.uuids()),
    (
        {"type": "int", "logicalType": "time-millis"},
        st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
    ),
    ({"type": "long", "logicalType": "time-micros"}, st.times()),
]


def _name(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@st.composite
def avro(draw: st.DrawFn, depth: int = 0) -> Typed:
    """A random Avro type and a strategy for its values."""
    choices = ["primitive", "logical", "nullable", "enum", "fixed", "grid"]
    if depth < 2:
        choices += ["record", "array", "map"]
    kind = draw(st.sampled_from(choices))
    if kind == "primitive":
        name = draw(st.sampled_from(sorted(PRIMITIVES)))
        return name, PRIMITIVES[name]
    if kind == "logical":
        return draw(st.sampled_from(LOGICAL))
    if kind == "nullable":
        inner, values = draw(avro(depth + 1).filter(lambda t: not isinstance(t[0], list)))
        first = draw(st.booleans())
        return (["null", inner] if first else [inner, "null"]), st.none() | values
    if kind == "enum":
        symbols = draw(st.lists(st.sampled_from("ABCDEFG"), min_size=1, max_size=4, unique=True))
        return {"type": "enum", "name": _name("E"), "symbols": symbols}, st.sampled_from(symbols)
    if kind == "fixed":
        size = draw(st.integers(0, 5))
        return {"type": "fixed", "name": _name("F"), "size": size}, st.binary(
            min_size=size, max_size=size
        )
    if kind == "grid":  # numbers in a fixed shape: an n-d column
        item = draw(st.sampled_from(["int", "long", "float", "double", "boolean"]))
        dims = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
        schema: Any = item
        cells: st.SearchStrategy[Any] = PRIMITIVES[item]
        for size in reversed(dims):
            schema = {"type": "array", "items": schema}
            cells = st.lists(cells, min_size=size, max_size=size)
        return schema, cells
    if kind == "record":
        return draw(record(depth + 1))
    inner, values = draw(avro(depth + 1))
    if kind == "array":
        return {"type": "array", "items": inner}, st.lists(values, max_size=3)
    return {"type": "map", "values": inner}, st.dictionaries(
        st.text(max_size=3), values, max_size=3
    )


@st.composite
def record(draw: st.DrawFn, depth: int = 0) -> Typed:
    fields = draw(st.lists(avro(depth), min_size=1, max_size=5))
    names = [f"f{i}" for i in range(len(fields))]
    schema = {
        "type": "record",
        "name": _name("R"),
        "fields": [{"name": n, "type": t} for n, (t, _) in zip(names, fields, strict=True)],
    }
    return schema, st.fixed_dictionaries({n: v for n, (_, v) in zip(names, fields, strict=True)})


@st.composite
def batches(draw: st.DrawFn) -> tuple[Schema, list[dict[str, Any]]]:
    raw, values = draw(record())
    store = SchemaStore(include_builtin=False)
    names = store.add_schema(raw)
    assert store.problems == []
    return store.get(names[-1]), draw(st.lists(values, min_size=0, max_size=6))


PATHS = [pytest.param(True, id="native"), pytest.param(False, id="fallback")]
FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _fastavro_bytes(schema: Schema, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(SingleObjectCodec(schema).header)
    fastavro.schemaless_writer(buf, schema.parsed, record)
    return buf.getvalue()


def _codec(schema: Schema, native: bool) -> ColumnCodec:
    if native and columns._native is None:
        pytest.skip("streamflow._native is not built")
    codec = ColumnCodec(schema, wire="single-object", native=native)
    assert codec.native is native
    return codec


@pytest.mark.parametrize("native", PATHS)
@FAST
@given(batch=batches())
def test_decode_gives_fastavros_records(native: bool, batch: tuple[Schema, list[Any]]) -> None:
    schema, records = batch
    values = [_fastavro_bytes(schema, r) for r in records]
    got = _codec(schema, native).decode(values)
    assert got.errors == []
    expected = [fastavro.schemaless_reader(io.BytesIO(v[10:]), schema.parsed, None) for v in values]
    assert got.to_records() == expected


@pytest.mark.parametrize("native", PATHS)
@FAST
@given(batch=batches())
def test_encode_gives_fastavros_bytes(native: bool, batch: tuple[Schema, list[Any]]) -> None:
    schema, records = batch
    values = [_fastavro_bytes(schema, r) for r in records]
    codec = _codec(schema, native)
    assert codec.encode_records(records) == (values, [])
    decoded = codec.decode(values)
    assert codec.encode(decoded.columns, decoded.n) == (values, [])  # the round trip


@FAST
@given(batch=batches())
def test_native_and_fallback_give_the_same_columns(batch: tuple[Schema, list[Any]]) -> None:
    schema, records = batch
    values = [_fastavro_bytes(schema, r) for r in records]
    native = _codec(schema, True).decode(values)
    fallback = _codec(schema, False).decode(values)
    assert native.columns.keys() == fallback.columns.keys()
    for name, column in native.columns.items():
        other = fallback.columns[name]
        assert type(column) is type(other), name
        assert column.dtype == other.dtype and column.shape == other.shape, name


@pytest.mark.parametrize("native", PATHS)
@FAST
@given(batch=batches())
def test_columns_of_decoded_records_are_the_decodes_columns(
    native: bool, batch: tuple[Schema, list[Any]]
) -> None:
    schema, records = batch
    values = [_fastavro_bytes(schema, r) for r in records]
    decoded = _codec(schema, native).decode(values)
    expected = [fastavro.schemaless_reader(io.BytesIO(v[10:]), schema.parsed, None) for v in values]

    made = Columns.from_records(schema, expected)

    assert made.columns.keys() == decoded.columns.keys()
    for name, column in made.columns.items():
        other = decoded.columns[name]
        assert type(column) is type(other), name
        assert column.dtype == other.dtype and column.shape == other.shape, name
    assert made.to_records() == expected
    assert records_of(schema, decoded.columns, decoded.n) == expected
