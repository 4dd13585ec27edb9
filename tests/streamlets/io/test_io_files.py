"""FileIngress (once, and following appends, truncation and rotation) and FileEgress."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamflow import Inlet, Outlet
from streamflow.api import Context, Record
from streamflow.streamlets.io import FileEgress, FileIngress, files

Make = Callable[..., Any]


class ReadingFile(FileIngress):
    out = Outlet("out", "iotest.Reading")


class ReadingSink(FileEgress):
    in_ = Inlet("in", "iotest.Reading")


def line(ident: str, sensor: int = 1) -> str:
    return json.dumps({"id": ident, "sensor": sensor, "value": 1.5}) + "\n"


class Script:
    """A fake sleep that changes the file between polls, then ends the test."""

    class Done(Exception):
        pass

    def __init__(self, *steps: Callable[[], None]) -> None:
        self.steps = list(steps)

    def __call__(self, seconds: float) -> None:
        if not self.steps:
            raise Script.Done
        self.steps.pop(0)()


def ids_until_done(streamlet: FileIngress) -> list[str]:
    got: list[str] = []
    with pytest.raises(Script.Done):
        for emit in streamlet.source():
            got.append(emit.value["id"])
    return got


# -- FileIngress -----------------------------------------------------------------------------


def test_reads_a_jsonl_file_once(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(line("a") + "\n" + line("b"), encoding="utf-8")
    emitted = list(make(ReadingFile, {"path": str(path)}).source())
    assert [e.value["id"] for e in emitted] == ["a", "b"]
    assert emitted[0].value["level"] == "LOW"  # defaults filled in by the JSON codec


def test_the_last_line_needs_no_newline_when_not_following(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(line("a") + line("b").rstrip("\n"), encoding="utf-8")
    assert len(list(make(ReadingFile, {"path": str(path)}).source())) == 2


def test_reads_csv_by_extension_or_declared_format(make: Make, tmp_path: Path) -> None:
    text = "id,sensor,value,ok\nx,3,0.25,false\n"
    (tmp_path / "in.csv").write_text(text)
    (tmp_path / "in.dat").write_text(text)
    for config in (
        {"path": str(tmp_path / "in.csv")},
        {"path": str(tmp_path / "in.dat"), "format": "csv"},
    ):
        [emit] = list(make(ReadingFile, config).source())
        assert emit.value["sensor"] == 3 and emit.value["ok"] is False


def test_bad_lines_are_logged_by_number_counted_and_skipped(
    make: Make, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(line("a") + "{oops\n" + '{"id": "b"}\n' + "[1]\n" + line("c"))
    ingress = make(ReadingFile, {"path": str(path)})
    with caplog.at_level(logging.WARNING):
        assert [e.value["id"] for e in ingress.source()] == ["a", "c"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "in.jsonl:2: skipped: not valid JSON" in warnings[0]
    assert "in.jsonl:3:" in warnings[1] and "sensor: missing required field" in warnings[1]
    assert "in.jsonl:4:" in warnings[2] and "expected a JSON object" in warnings[2]
    assert ingress.reader.rows_skipped == 3 and ingress.reader.records_read == 2


def test_key_field_keys_the_records(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(line("a", sensor=42))
    [emit] = list(make(ReadingFile, {"path": str(path), "key_field": "id"}).source())
    assert emit.key == "a"


def test_a_missing_file_fails_at_setup_unless_following(make: Make, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="set follow to wait for it"):
        make(ReadingFile, {"path": str(tmp_path / "absent.jsonl")})
    make(ReadingFile, {"path": str(tmp_path / "absent.jsonl"), "follow": True})


def test_follow_reads_appended_lines_and_waits_for_a_partial_line(
    make: Make, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(line("a") + line("b")[:10])

    def complete_the_line() -> None:
        with path.open("a") as f:
            f.write(line("b")[10:] + line("c"))

    ingress = make(
        ReadingFile, {"path": str(path), "follow": True}, sleep=Script(complete_the_line)
    )
    assert ids_until_done(ingress) == ["a", "b", "c"]


def test_follow_waits_for_the_file_then_survives_truncation_and_rotation(
    make: Make, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"

    def create() -> None:
        path.write_text(line("a") + line("b") + line("c"))

    def truncate() -> None:  # copytruncate: the same file, emptied, then written again
        with path.open("r+") as f:
            f.truncate(0)
            f.write(line("d"))

    def rotate() -> None:  # a new file at the path
        path.rename(tmp_path / "in.jsonl.1")
        path.write_text(line("e"))

    def append_to_new() -> None:
        with path.open("a") as f:
            f.write(line("f"))

    script = Script(create, lambda: None, truncate, rotate, append_to_new)
    ingress = make(
        ReadingFile, {"path": str(path), "follow": True, "poll_interval": "10ms"}, sleep=script
    )
    assert ids_until_done(ingress) == ["a", "b", "c", "d", "e", "f"]


def test_follow_keeps_the_unterminated_last_line_of_a_rotated_file(
    make: Make, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(line("a") + line("b").rstrip("\n"))

    def rotate() -> None:
        path.rename(tmp_path / "in.jsonl.1")
        path.write_text(line("c"))

    ingress = make(ReadingFile, {"path": str(path), "follow": True}, sleep=Script(rotate))
    assert ids_until_done(ingress) == ["a", "b", "c"]


def test_follow_a_csv_file_rereads_the_header_of_a_rotated_file(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,sensor,value\na,1,1\n")

    def append() -> None:
        with path.open("a") as f:
            f.write("b,2,2\n")

    def rotate() -> None:
        path.rename(tmp_path / "old.csv")
        path.write_text("value,sensor,id\n3,3,c\n")

    ingress = make(ReadingFile, {"path": str(path), "follow": True}, sleep=Script(append, rotate))
    assert ids_until_done(ingress) == ["a", "b", "c"]


# -- FileEgress ------------------------------------------------------------------------------


def record(value: dict[str, Any], key: str | None = None) -> Record:
    return Record(value=value, key=key, inlet="in")


def read_lines(path: Path) -> list[Any]:
    return [json.loads(text) for text in path.read_text().splitlines()]


def test_egress_appends_one_json_object_per_record(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "out" / "records.jsonl"
    sink = make(ReadingSink, {"path": str(path)})
    values = [
        {"id": "a", "blob": b"\x00\xff", "at": dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)},
        {"id": "b", "day": dt.date(2024, 5, 2), "price": decimal.Decimal("1.50")},
    ]
    assert sink.process_batch([record(v) for v in values]) == [None, None]
    # On disk as soon as the batch returns (before any teardown), so a commit is safe.
    assert read_lines(path) == [
        {
            "id": "a",
            "blob": base64.b64encode(b"\x00\xff").decode(),
            "at": "2024-05-01T10:00:00+00:00",
        },
        {"id": "b", "day": "2024-05-02", "price": "1.50"},
    ]
    sink.teardown()


def test_egress_can_include_the_key_and_appends_across_restarts(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    first = make(ReadingSink, {"path": str(path), "include_key": True})
    first.process_batch([record({"id": "a"}, key="k1")])
    first.teardown()
    second = make(ReadingSink, {"path": str(path), "include_key": True})
    second.process_batch([record({"id": "b"})])
    second.teardown()
    assert read_lines(path) == [
        {"key": "k1", "value": {"id": "a"}},
        {"key": None, "value": {"id": "b"}},
    ]


def test_egress_fsyncs_each_batch_when_asked(
    make: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(files.os, "fsync", synced.append)
    sink = make(ReadingSink, {"path": str(tmp_path / "r.jsonl"), "fsync": True})
    sink.process_batch([record({"id": "a"}), record({"id": "b"})])
    sink.process_batch([record({"id": "c"})])
    assert len(synced) == 2
    sink.teardown()
    quiet = make(ReadingSink, {"path": str(tmp_path / "r.jsonl")})
    quiet.process_batch([record({"id": "d"})])
    assert len(synced) == 2
    quiet.teardown()


def test_egress_path_names_the_replica(tmp_path: Path, store: Any) -> None:
    sink = ReadingSink({"path": str(tmp_path / "{app}-{streamlet}-{replica}.jsonl")})
    sink.setup(Context(app="shop", streamlet="sink", replica=2, schema_store=store))
    sink.process_batch([record({"id": "a"})])
    sink.teardown()
    assert (tmp_path / "shop-sink-2.jsonl").exists()
    with pytest.raises(ValueError, match=r"only \{app\}, \{streamlet\} and \{replica\}"):
        ReadingSink({"path": str(tmp_path / "{host}.jsonl")}).setup(Context())


def test_egress_refuses_to_write_after_teardown(make: Make, tmp_path: Path) -> None:
    sink = make(ReadingSink, {"path": str(tmp_path / "r.jsonl")})
    sink.teardown()
    sink.teardown()  # twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        sink.process_batch([record({"id": "a"})])
    assert os.path.getsize(tmp_path / "r.jsonl") == 0
