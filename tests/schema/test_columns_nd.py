"""Nested numeric arrays (n-d columns), which the native decoder reads straight into numpy.

The native path walks such an array without building a value per number, so
these tests hold it to what the general path gives: shapes that differ from
record to record, ragged records among rectangular ones, empty levels, records
that fail in the middle of an array (which must leave nothing in the column),
and other writers whose numbers are promoted. Each runs on the native path and
on the fastavro fallback.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import numpy as np
import pytest

from streamflow.schema import Schema, SchemaStore, SingleObjectCodec, columns
from streamflow.schema.bounds import DecodeLimits
from streamflow.schema.columns import ColumnCodec
from tests.schema.avro_support import bare, varint

GRID = {
    "type": "record",
    "name": "Grid",
    "namespace": "nd",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "float"}}},
        {
            "name": "cube",
            "type": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "array", "items": "long"}},
            },
        },
    ],
}


@pytest.fixture
def grid(make_schema: Any) -> Schema:
    return make_schema(GRID)  # type: ignore[no-any-return]


def _record(i: int, rows: int = 2, cols: int = 3) -> dict[str, Any]:
    return {
        "id": i,
        "grid": [[(i + r * cols + c) / 4 for c in range(cols)] for r in range(rows)],
        "cube": [[[i * 100 + r * 10 + c, -c] for c in range(cols)] for r in range(rows)],
    }


def test_one_shape_in_the_batch_is_one_array(grid: Schema, native: bool) -> None:
    records = [_record(i) for i in range(5)]
    codec = ColumnCodec(grid, wire="bare", native=native)

    got = codec.decode([bare(grid, r) for r in records])

    assert got.column("grid").dtype == np.float32 and got.column("grid").shape == (5, 2, 3)
    assert got.column("cube").dtype == np.int64 and got.column("cube").shape == (5, 2, 3, 2)
    assert got.to_records() == records


def test_other_shapes_ragged_and_empty_records_among_same_shape_ones(
    grid: Schema, native: bool
) -> None:
    ragged = {"id": 9, "grid": [[1.0], [2.0, 3.0]], "cube": [[[1], [2, 3]]]}
    empty = {"id": 10, "grid": [], "cube": [[], []]}
    records = [_record(0), _record(1, rows=3, cols=1), ragged, _record(2), empty, _record(3)]
    codec = ColumnCodec(grid, wire="bare", native=native)

    got = codec.decode([bare(grid, r) for r in records])

    assert got.errors == [] and got.to_records() == records
    shapes = [np.shape(v) if isinstance(v, np.ndarray) else None for v in got.column("grid")]
    assert shapes == [(2, 3), (3, 1), None, (2, 3), (0, 0), (2, 3)]
    assert got.column("grid")[2] == [[1.0], [2.0, 3.0]]  # kept as fastavro's lists
    cubes = [np.shape(v) if isinstance(v, np.ndarray) else None for v in got.column("cube")]
    assert cubes == [(2, 3, 2), (3, 1, 2), None, (2, 3, 2), (2, 0, 0), (2, 3, 2)]
    assert got.column("cube")[1].dtype == np.int64


def test_a_record_failing_inside_an_array_leaves_nothing_in_the_column(grid: Schema) -> None:
    if columns._native is None:
        pytest.skip("streamflow._native is not built")
    good = [bare(grid, _record(i)) for i in range(4)]
    cut = good[1][: len(good[1]) - 5]  # ends inside the last innermost array of cube
    grown = good[2] + b"\x00"  # a trailing byte after a whole record
    batch = [good[0], cut, grown, good[3], good[1][:9]]  # and one ending inside grid

    native = ColumnCodec(grid, wire="bare").decode(batch)
    fallback = ColumnCodec(grid, wire="bare", native=False).decode(batch)

    truncated = (
        "cannot decode nd.Grid: the record is truncated ({} bytes end in the middle of a value)"
    )
    assert native.errors == [  # fastavro words a cut varint its own way: not compared
        (1, truncated.format(len(cut))),
        (2, "1 trailing bytes after the nd.Grid record"),
        (4, truncated.format(9)),
    ]
    assert [i for i, _ in fallback.errors] == [1, 2, 4]
    assert native.rows.tolist() == [0, 3]
    assert native.column("grid").shape == (2, 2, 3)
    assert native.to_records() == [_record(0), _record(3)] == fallback.to_records()


def test_a_huge_inner_block_is_refused_before_it_is_read(grid: Schema) -> None:
    if columns._native is None:
        pytest.skip("streamflow._native is not built")
    body = b"\x02" + b"\x02" + varint(2**31) + b"\x00" * 4
    codec = ColumnCodec(grid, wire="bare", limits=DecodeLimits(max_items=1000))

    got = codec.decode([bare(grid, _record(0)), body])

    assert got.rows.tolist() == [0] and got.column("grid").shape == (1, 2, 3)
    assert got.errors == [
        (
            1,
            "refused before decoding: an array declares more than 1,000 items "
            "(decode_limits.max_items)",
        )
    ]


def test_an_older_writer_of_ints_is_promoted_like_fastavro(native: bool) -> None:
    older = {
        **GRID,
        "fields": [
            {"name": "id", "type": "int"},
            {
                "name": "grid",
                "type": {"type": "array", "items": {"type": "array", "items": "int"}},
            },
            {
                "name": "cube",
                "type": {
                    "type": "array",
                    "items": {"type": "array", "items": {"type": "array", "items": "int"}},
                },
            },
        ],
    }
    store = SchemaStore(include_builtin=False)
    store.add_schema(GRID)
    store.add_version(older)
    reader = store.get("nd.Grid")
    assert store.problems == []
    (fingerprint,) = store._versions
    writer = store.by_fingerprint(fingerprint)
    assert writer is not None
    records = [
        {
            "id": i,
            "grid": [[i + c - 5 for c in range(3)] for _ in range(2)],
            "cube": [[[i, -(2**31)]] * 2],
        }
        for i in range(4)
    ]
    values = [SingleObjectCodec(writer).encode(r) for r in records]
    codec = ColumnCodec(reader, wire="single-object", store=store, native=native)

    got = codec.decode(values)

    expected = [
        fastavro.schemaless_reader(io.BytesIO(v[10:]), writer.parsed, reader.parsed) for v in values
    ]
    assert got.errors == [] and got.to_records() == expected
    assert got.column("grid").dtype == np.float32 and got.column("grid").shape == (4, 2, 3)
    assert got.column("cube").dtype == np.int64 and got.column("cube").shape == (4, 1, 2, 2)
