"""``streamflow score`` on columns: Parquet tables encoded in one call, results kept as
decoded columns and written to Parquet from them.

The claim each test pins is that the columns change nothing a user can see: a
table gives the bytes its rows give one by one through the topic's codec (the
coerced rows and the refused ones, with their reasons, included), and the
results file is the one ``Table.from_pylist`` writes of the decoded records,
types and nulls and row order included. Each runs with the native module and
with the fastavro fallback.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from streamflow.schema import SchemaStore, SingleObjectCodec, columns
from streamflow.schema.codecs import EncodeError
from streamflow.schema.columns import ColumnCodec
from streamflow.score import arrow_arrays, inputs
from streamflow.score.collected import Results
from streamflow.score.feed import Feed
from streamflow.score.inputs import InputBatch, InputRow

pa = pytest.importorskip("pyarrow")

UTC = dt.UTC
SCHEMA = {
    "type": "record",
    "name": "Row",
    "namespace": "t",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "count", "type": "int"},
        {"name": "x", "type": "double"},
        {"name": "f", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "maybe", "type": ["null", "long"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "payload", "type": "bytes"},
        {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LO", "HI"]}},
        {"name": "vec", "type": {"type": "array", "items": "double"}},
        {"name": "note", "type": "string", "default": "none"},
    ],
}


@pytest.fixture(params=[True, False], ids=["native", "fallback"])
def native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param and columns._native is None:
        pytest.skip("streamflow._native is not built")
    if not request.param:
        monkeypatch.setattr(columns, "_native", None)
    return bool(request.param)


@pytest.fixture
def codec() -> SingleObjectCodec:
    store = SchemaStore(include_builtin=False)
    store.add_schema(SCHEMA)
    return SingleObjectCodec(store.get("t.Row"))


def _row(i: int) -> dict[str, Any]:
    return {
        "id": f"r{i}",
        "seq": 10**12 + i,
        "count": i,
        "x": i / 3,
        "f": i / 7,
        "ok": i % 2 == 0,
        "maybe": None if i % 3 == 0 else i,
        "at": dt.datetime(2026, 12, 7, 13, 0, i % 60, 123000, tzinfo=UTC),
        "day": dt.date(2026, 1, 1 + i % 28),
        "payload": bytes([i % 256]) * 3,
        "level": "HI" if i % 2 else "LO",
        "vec": [float(i), 0.5],
        "note": f"n{i}",
        "extra": "a column no field reads",
    }


def _one_by_one(codec: SingleObjectCodec, docs: list[dict[str, Any]]) -> list[Any]:
    """What the rows give through the codec one at a time: bytes, or the reason."""
    convert = inputs.converter(codec.schema)
    out: list[Any] = []
    for doc in docs:
        try:
            out.append(codec.encode(doc))
        except EncodeError:
            try:
                out.append(codec.encode(convert(doc)))
            except Exception as exc:
                out.append(str(exc))
    return out


def test_a_table_encodes_to_the_bytes_its_rows_give_one_by_one(
    native: bool, codec: SingleObjectCodec
) -> None:
    docs = [_row(i) for i in range(40)]
    docs[5]["level"] = "MID"  # no symbol of the enum: refused, with the codec's reason
    docs[9]["maybe"] = None
    del docs[11]["note"]  # a row with no value takes the field's default
    table = pa.Table.from_pylist(docs)
    docs[11]["note"] = None  # what to_pylist gives the row: the column is there
    feed = Feed(codec, inputs.converter(codec.schema))

    encoded = feed.encode(InputBatch(100, table=table))

    expected = _one_by_one(codec, docs)
    assert list(encoded.rows) == list(range(100, 140))
    assert encoded.values == [v if isinstance(v, bytes) else None for v in expected]
    assert [(row, why) for row, _doc, why in encoded.refused] == [
        (100 + i, v) for i, v in enumerate(expected) if not isinstance(v, bytes)
    ]
    assert len(encoded.refused) == 2  # the level, and the row whose note is null
    # nothing lost: every row is bytes or a refusal
    assert sum(v is not None for v in encoded.values) + len(encoded.refused) == 40


def test_a_field_the_table_lacks_takes_its_default(native: bool, codec: SingleObjectCodec) -> None:
    docs = [_row(i) for i in range(3)]
    for doc in docs:
        del doc["note"]
    encoded = Feed(codec).encode(InputBatch(0, table=pa.Table.from_pylist(docs)))
    assert encoded.refused == []
    assert [codec.decode(v)["note"] for v in encoded.values if v] == ["none"] * 3


def test_a_column_in_another_type_is_coerced_as_a_row_is(
    native: bool, codec: SingleObjectCodec
) -> None:
    docs = [_row(i) for i in range(4)]
    for doc in docs:  # text where the schema says bytes and a timestamp: base64, ISO 8601
        doc["payload"] = "AAEC"
        doc["at"] = "2026-12-07T13:00:00Z"
    docs[2]["x"] = None  # and one that nothing can mend
    table = pa.Table.from_pylist(docs)
    encoded = Feed(codec, inputs.converter(codec.schema)).encode(InputBatch(0, table=table))
    expected = _one_by_one(codec, docs)
    assert encoded.values == [v if isinstance(v, bytes) else None for v in expected]
    assert [codec.decode(v)["payload"] for v in encoded.values if v] == [b"\x00\x01\x02"] * 3
    assert [row for row, _doc, _why in encoded.refused] == [2]


def test_rows_of_csv_or_json_encode_one_by_one(codec: SingleObjectCodec) -> None:
    rows = [
        InputRow(0, _row(0), _row(0)),
        InputRow(1, None, {"id": "x"}, "line 2: not JSON"),
        InputRow(2, _row(2), _row(2)),
    ]
    encoded = Feed(codec).encode(InputBatch(0, rows))
    assert encoded.values[1] is None and encoded.refused == [(1, {"id": "x"}, "line 2: not JSON")]
    assert encoded.values[0] == codec.encode(_row(0))


@pytest.mark.parametrize(
    "values, kind",
    [
        ([1, None, -3, 2**40], pa.int64()),
        ([1, None, 7], pa.int8()),
        ([1, 2, None], pa.uint32()),
        ([0.5, None, -2.25], pa.float32()),
        ([True, None, False, True, True, False, True, False, True], pa.bool_()),
        ([dt.datetime(2026, 1, 2, 3, 4, 5, 678000), None], pa.timestamp("ms")),
        ([dt.date(2026, 12, 7), None, dt.date(1969, 12, 31)], pa.date32()),
    ],
)
def test_fixed_width_arrow_columns_become_numpy_without_a_copy_of_the_values(
    values: list[Any], kind: Any
) -> None:
    full = pa.array(values, type=kind)
    for array in (full, full.slice(1)):  # an offset into the buffers, too
        got = arrow_arrays.to_numpy(array)
        assert got is not None
        expected = array.to_pylist()
        mask = np.ma.getmaskarray(got)
        assert [e is None for e in expected] == mask.tolist()
        plain = np.asarray(np.ma.getdata(got))
        for e, g, m in zip(expected, plain.tolist(), mask.tolist(), strict=True):
            if not m:
                assert g == e


def test_other_arrow_columns_are_left_to_pyarrow() -> None:
    assert arrow_arrays.to_numpy(pa.array(["a"])) is None
    assert arrow_arrays.to_numpy(pa.array([2**63], type=pa.uint64())) is None
    assert arrow_arrays.to_numpy(pa.array([[1.0]])) is None


def _decoded(codec: SingleObjectCodec, docs: list[dict[str, Any]], native: bool) -> Any:
    column_codec = ColumnCodec(codec.schema, wire="single-object", native=native)
    return column_codec.decode([codec.encode(d) for d in docs])


def test_results_from_columns_write_the_table_from_pylist_writes(
    native: bool, codec: SingleObjectCodec
) -> None:
    docs = [{k: v for k, v in _row(i).items() if k != "extra"} for i in range(30)]
    docs[4]["id"] = "caf\u00e9 \U0001f600"
    first, second = _decoded(codec, docs[15:], native), _decoded(codec, docs[:15], native)
    results = Results()
    results.add_columns(list(range(29, 14, -1)), first)  # out of row order, as they come
    results.add_columns(list(range(15)), second)

    table = results.arrow_table("row")

    decoded = [codec.decode(codec.encode(d)) for d in docs]
    by_row = {
        **dict(zip(range(29, 14, -1), decoded[15:], strict=True)),
        **dict(enumerate(decoded[:15])),
    }
    expected = pa.Table.from_pylist([{"row": r, **by_row[r]} for r in sorted(by_row)])
    assert table is not None
    assert table.schema == expected.schema
    assert table.equals(expected)
    assert results[17] == by_row[17] and len(results) == 30 and 30 not in results


def test_nested_records_in_the_results_are_written_as_structs(native: bool) -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(
        {
            "type": "record",
            "name": "Out",
            "namespace": "t",
            "fields": [
                {"name": "id", "type": "string"},
                {
                    "name": "top",
                    "type": {
                        "type": "record",
                        "name": "Top",
                        "fields": [
                            {"name": "label", "type": "string"},
                            {"name": "p", "type": "double"},
                        ],
                    },
                },
            ],
        }
    )
    codec = SingleObjectCodec(store.get("t.Out"))
    docs = [{"id": f"r{i}", "top": {"label": "a", "p": i / 2}} for i in range(3)]
    results = Results()
    results.add_columns([2, 0, 1], _decoded(codec, docs, native))
    assert results.arrow_table("row") is None  # columns a.b: written from the records
    assert results.items() == [(0, docs[1]), (1, docs[2]), (2, docs[0])]


def test_prefetch_hands_over_batches_errors_and_stops_its_source() -> None:
    closed = threading.Event()

    def source(fail_at: int | None) -> Iterator[InputBatch]:
        try:
            for i in range(5):
                if i == fail_at:
                    raise OSError("the disk went away")
                yield InputBatch(i, [InputRow(i, {"n": i})])
        finally:
            closed.set()

    with inputs.Prefetch(source(None)) as batches:
        assert [b.first for b in batches] == [0, 1, 2, 3, 4]
    assert closed.is_set()

    closed.clear()
    with inputs.Prefetch(source(2)) as batches, pytest.raises(OSError, match="went away"):
        list(batches)
    assert closed.is_set()

    closed.clear()
    prefetch = inputs.Prefetch(source(None), ahead=1)
    next(iter(prefetch))  # left after one batch: closing stops the reading
    prefetch.close()
    assert closed.is_set()


def test_a_column_of_nulls_only_is_written_as_from_pylist_writes_it(
    native: bool, codec: SingleObjectCodec
) -> None:
    docs = [{k: v for k, v in _row(i).items() if k != "extra"} for i in range(6)]
    for doc in docs:
        doc["maybe"] = None
    results = Results()
    results.add_columns(list(range(6)), _decoded(codec, docs, native))
    table = results.arrow_table("row")
    expected = pa.Table.from_pylist(
        [{"row": i, **codec.decode(codec.encode(doc))} for i, doc in enumerate(docs)]
    )
    assert table is not None and table.schema == expected.schema and table.equals(expected)
    assert table.schema.field("maybe").type == pa.null()


def test_times_without_a_zone_and_dates_for_timestamps_go_as_rows_did(
    native: bool, codec: SingleObjectCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fastavro reads a naive datetime in the machine's zone, and refuses a date for a
    timestamp: the table's bytes are the rows' bytes, in a zone that is not UTC too."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        docs = [_row(i) for i in range(4)]
        naive = [{**doc, "at": doc["at"].replace(tzinfo=None)} for doc in docs]
        as_date = [{**doc, "at": doc["day"]} for doc in docs]
        for rows in (naive, as_date):
            table = pa.Table.from_pylist(rows)
            encoded = Feed(codec, inputs.converter(codec.schema)).encode(InputBatch(0, table=table))
            expected = _one_by_one(codec, rows)
            assert encoded.values == [v if isinstance(v, bytes) else None for v in expected]
        assert all(Feed(codec).encode(InputBatch(0, table=pa.Table.from_pylist(naive))).values)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_of_copies_of_a_result_in_one_consume_the_first_that_decodes_is_kept(
    codec: SingleObjectCodec,
) -> None:
    from typing import cast

    from confluent_kafka import Consumer, Producer

    from streamflow.score import engine

    scorer = engine.Scorer(
        producer=cast(Producer, None),
        failures=engine.FailedRows(),
        consumer=cast(Consumer, None),
        input_topic="in",
        input_codec=codec,
        input_schema="t.Row",
        output_topic="out",
        output_codec=codec,
        dead_letter_topics={},
        run_id="run",
    )
    good = codec.encode(_row(5))
    scorer._results([5, 5, 7, 5], [b"\xc3\x01 broken", good, codec.encode(_row(7)), good])
    assert sorted(scorer.outcome.results) == [5, 7] and scorer.outcome.results[5]["id"] == "r5"
    assert scorer.outcome.dead[5].stage == "collect"  # kept, but the result wins
    assert scorer.outcome.extra_results == 1
