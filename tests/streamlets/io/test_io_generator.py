"""The generator: synthesised and dataset records, typed CSV, keys, count, loop and rate."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamflow import Outlet
from streamflow.api import Context, describe
from streamflow.api.ports import KEEP_KEY
from streamflow.schema import SchemaStore, SingleObjectCodec
from streamflow.schema.validate import validation_problems
from streamflow.streamlets.io import Generator

Make = Callable[..., Any]


class ReadingFeed(Generator):
    out = Outlet("out", "iotest.Reading")


class EverythingFeed(Generator):
    out = Outlet("out", "iotest.Everything")


def values(streamlet: Generator, limit: int | None = None) -> list[dict[str, Any]]:
    out = []
    for emit in streamlet.source():
        out.append(emit.value)
        if limit is not None and len(out) == limit:
            break
    return out


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_synthesised_records_are_valid_and_encodable(make: Make, store: SchemaStore) -> None:
    feed = make(EverythingFeed, {"count": 50, "seed": 1})
    schema = store.get("iotest.Everything")
    codec = SingleObjectCodec(schema)
    emitted = list(feed.source())
    assert len(emitted) == 50
    for emit in emitted:
        assert emit.outlet == "out"
        assert validation_problems(schema, emit.value, strict=True) == []
        codec.encode(emit.value)


def test_the_seed_makes_synthesis_reproducible(make: Make) -> None:
    first = values(make(ReadingFeed, {"count": 5, "seed": 9}))
    assert first == values(make(ReadingFeed, {"count": 5, "seed": 9}))
    assert first != values(make(ReadingFeed, {"count": 5, "seed": 10}))


def test_count_zero_is_unlimited(make: Make) -> None:
    assert len(values(make(ReadingFeed), limit=2000)) == 2000


def test_key_field_keys_each_record(make: Make) -> None:
    emitted = list(make(ReadingFeed, {"count": 3, "key_field": "sensor"}).source())
    assert [e.key for e in emitted] == [str(e.value["sensor"]) for e in emitted]


def test_without_key_field_the_outlet_decides_the_key(make: Make) -> None:
    emitted = list(make(ReadingFeed, {"count": 1}).source())
    assert emitted[0].key is KEEP_KEY


def test_an_unknown_key_field_is_a_setup_error(make: Make) -> None:
    with pytest.raises(ValueError, match=r"key_field 'nope' is not a field of iotest.Reading"):
        make(ReadingFeed, {"key_field": "nope"})


def test_jsonl_dataset_is_coerced_and_completed_with_defaults(make: Make, tmp_path: Path) -> None:
    lines = [
        {"id": "a", "sensor": 1, "value": 2},
        {"id": "b", "sensor": 2, "value": 0.5, "level": "HIGH", "at": "2024-05-01T10:00:00Z"},
    ]
    dataset = write(tmp_path / "d.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    got = values(make(ReadingFeed, {"dataset": dataset}))
    assert got[0] == {
        "id": "a", "sensor": 1, "value": 2.0, "ok": True, "note": None,
        "level": "LOW", "tags": [], "count": None, "at": None,
    }  # fmt: skip
    assert isinstance(got[0]["value"], float)
    assert got[1]["level"] == "HIGH"
    assert got[1]["at"].isoformat() == "2024-05-01T10:00:00+00:00"


CSV = """id,sensor,value,ok,note,level,tags,count,unknown
a,1,2.5,true,,HIGH,"[""x"", ""y""]",7,ignored
b,2,-1,no,hello,,[],,
"""


def test_csv_cells_are_typed_by_the_schema(make: Make, tmp_path: Path) -> None:
    got = values(make(ReadingFeed, {"dataset": write(tmp_path / "d.csv", CSV)}))
    assert got[0] == {
        "id": "a", "sensor": 1, "value": 2.5, "ok": True, "note": None,
        "level": "HIGH", "tags": ["x", "y"], "count": 7, "at": None,
    }  # fmt: skip
    # "-1" for a double is a float; an empty enum cell takes the default; "no" is false.
    assert got[1]["value"] == -1.0 and isinstance(got[1]["value"], float)
    assert got[1]["ok"] is False
    assert got[1]["note"] == "hello"
    assert got[1]["level"] == "LOW"
    assert got[1]["count"] is None


def test_bad_rows_are_logged_with_their_line_and_skipped(
    make: Make, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = "id,sensor,value\na,1,1.0\nb,not-a-number,2.0\nc,3\nd,4,4.0\n"
    feed = make(ReadingFeed, {"dataset": write(tmp_path / "d.csv", text)})
    with caplog.at_level(logging.WARNING):
        got = values(feed)
    assert [r["id"] for r in got] == ["a", "d"]
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("d.csv:3:" in m and "sensor" in m for m in messages)
    assert any("d.csv:4:" in m and "2 cells" in m for m in messages)
    assert feed.dataset_reader is not None and feed.dataset_reader.rows_skipped == 2


def test_loop_restarts_the_dataset_and_count_stops_it(make: Make, tmp_path: Path) -> None:
    dataset = write(
        tmp_path / "d.jsonl", '{"id":"a","sensor":1,"value":1}\n{"id":"b","sensor":2,"value":2}\n'
    )
    got = values(make(ReadingFeed, {"dataset": dataset, "loop": True, "count": 5}))
    assert [r["id"] for r in got] == ["a", "b", "a", "b", "a"]


def test_without_loop_the_dataset_is_emitted_once(make: Make, tmp_path: Path) -> None:
    dataset = write(tmp_path / "d.jsonl", '{"id":"a","sensor":1,"value":1}\n')
    assert len(values(make(ReadingFeed, {"dataset": dataset, "count": 10}))) == 1


def test_looping_a_dataset_without_valid_records_fails_clearly(make: Make, tmp_path: Path) -> None:
    dataset = write(tmp_path / "d.jsonl", '{"id": 1}\n')
    with pytest.raises(ValueError, match=r"no valid iotest\.Reading record"):
        values(make(ReadingFeed, {"dataset": dataset, "loop": True}))


def test_a_missing_dataset_or_unknown_extension_fails_at_setup(make: Make, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a file"):
        make(ReadingFeed, {"dataset": str(tmp_path / "absent.jsonl")})
    with pytest.raises(ValueError, match="set the format parameter"):
        make(ReadingFeed, {"dataset": write(tmp_path / "d.txt", "")})
    assert make(ReadingFeed, {"dataset": write(tmp_path / "d.txt", ""), "format": "jsonl"})


def test_rate_paces_records_on_the_injected_clock(make: Make) -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    feed = make(ReadingFeed, {"rate": 4, "count": 9}, clock=lambda: now[0], sleep=sleep)
    emitted_at = []
    for _ in feed.source():
        emitted_at.append(now[0])
    assert emitted_at == pytest.approx([i * 0.25 for i in range(9)])
    assert sum(sleeps) == pytest.approx(2.0)


def test_the_generic_base_explains_how_to_bind_a_schema() -> None:
    with pytest.raises(ValueError, match=r"Generator is generic.*for_schema\('my.Schema'\)"):
        Generator().setup(Context())


def test_a_bound_subclass_describes_as_an_ingress() -> None:
    descriptor = describe(ReadingFeed)
    assert descriptor.shape.value == "ingress"
    assert descriptor.logic == "source"
    assert descriptor.outlets[0].schema == "iotest.Reading"
    assert {p.name for p in descriptor.params} == {
        "dataset", "format", "rate", "count", "loop", "key_field", "seed",
    }  # fmt: skip
