"""Data sets written to hurt ``streamflow score``: each bad row is that row's problem.

A JSON line nested 100,000 deep, a number of 5,000 digits and bytes that are not
UTF-8 each ended the run with a traceback; a 17 KB Parquet file cost 1.25 GiB
for one row. Here each is a row (or, for Parquet, a run of rows) reported with
its number, and the rows around it are read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamflow.schema.store import SchemaStore
from streamflow.score import inputs, parquet_reader, results
from streamflow.score.engine import DeadRow, Outcome

pq = pytest.importorskip("pyarrow.parquet")
data = pytest.importorskip("tests.score.hostile_data")  # it needs pyarrow too

ROOT = Path(__file__).resolve().parents[2]
STORE = SchemaStore([ROOT / "tests" / "runtime" / "schemas"])
READING = STORE.get("tests.runtime.Reading")
MIB = data.MIB


def test_json_lines_that_cannot_be_read_are_their_rows_problems(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(data.hostile_lines())
    assert inputs.count_rows(path, "jsonl") == 8
    rows = list(inputs.read_rows(path, "jsonl", READING))
    assert [(r.row, r.value is not None) for r in rows] == [
        (0, True), (1, False), (2, False), (3, True), (4, False), (5, False), (6, True), (7, True),
    ]  # fmt: skip
    problems = {r.row: r.problem for r in rows if r.problem}
    assert problems[1] == "line 2: not valid JSON: nested deeper than 64 levels"
    assert problems[2] == "line 3: not valid JSON: a number of more than 4,300 digits"
    assert problems[4] == "line 5: not UTF-8: byte 0xff at column 9"
    assert problems[5] == "line 6: not valid JSON: nested deeper than 64 levels"
    assert all(r.doc is None for r in rows if r.problem)


def test_a_refused_row_holding_a_lone_surrogate_is_written_to_the_dead_letters(
    tmp_path: Path,
) -> None:
    """``"\\ud800"`` is valid JSON for a string no UTF-8 file can hold."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "\\ud800", "seq": "x", "value": 1}\n')
    (row,) = inputs.read_rows(path, "jsonl", READING)
    assert row.value is None and row.doc == {"id": "\ud800", "seq": "x", "value": 1}
    outcome = Outcome(dead={0: DeadRow(0, "input", row.problem, "InvalidRow", doc=row.doc)})
    dead = tmp_path / "out.dead-letters.jsonl"
    assert results.write_dead_letters(dead, outcome) == 1
    assert json.loads(dead.read_text(encoding="utf-8"))["input"]["id"] == "\ud800"


def test_csv_rows_that_cannot_be_read_are_their_rows_problems(tmp_path: Path) -> None:
    (tmp_path / "nested.avsc").write_text(
        json.dumps(
            {
                "type": "record",
                "name": "Nested",
                "namespace": "tests.score",
                "fields": [
                    {"name": "id", "type": "string"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                ],
            }
        )
    )
    schema = SchemaStore([tmp_path]).get("tests.score.Nested")
    path = tmp_path / "in.csv"
    deep = b"[" * 60_000 + b"]" * 60_000  # within the csv module's field limit
    path.write_bytes(b'id,tags\na,"[""x""]"\nb\xff,[]\nc,' + deep + b'\nd,"[""y""]"\n')
    assert inputs.count_rows(path, "csv") == 4
    rows = list(inputs.read_rows(path, "csv", schema))
    assert [r.value is not None for r in rows] == [True, False, False, True]
    assert rows[1].problem == "line 3: not UTF-8: byte 0xff in column 'id'"
    assert "tags: expected an array" in rows[2].problem  # too deep for JSON: left as text


# -- Parquet --------------------------------------------------------------------------------


def test_parquet_rows_past_the_read_budget_are_refused_and_the_rest_read(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    data.hostile_parquet(path, values=40_000_000, count=400)
    assert path.stat().st_size < 64 * 1024
    rows = list(parquet_reader.read(path, budget=256 * MIB))
    assert [(number, doc["id"] if doc else None) for number, doc, _ in rows] == [
        (0, "r0"), (1, "r1"), (2, "r2"), (3, None), (4, None), (5, "r5"),
    ]  # fmt: skip
    problems = {number: problem for number, _, problem in rows if problem}
    assert problems[3] == (
        "row 3 (row group 1) is not read: its footer declares 40,000,004 values for 1 row, "
        "more than a batch of rows may take (256 MiB)"
    )
    assert problems[4] == (
        "row 4 (row group 2) is not read: reading it takes more memory than a batch of "
        "rows may (256 MiB)"
    )


def test_a_footer_that_lies_about_its_values_does_not_lift_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "lies.parquet"
    data.write_groups(path, [data.rows([0]), data.rows([1], bits=data.zeros(100_000_000))])
    data.lying_footer(path, 100_000_000)
    assert pq.ParquetFile(path).metadata.row_group(1).column(4).num_values == 1
    rows = list(parquet_reader.read(path, budget=256 * MIB))
    assert [(n, doc is not None) for n, doc, _ in rows] == [(0, True), (1, False)]
    assert "takes more memory than a batch of rows may (256 MiB)" in rows[1][2]


def test_reading_a_17_kb_parquet_file_costs_what_the_budget_allows(tmp_path: Path) -> None:
    """The finding as reported: the whole ``read_rows``, in a process of its own, so its
    peak memory (``VmHWM``, Linux's; ``ru_maxrss`` would count the memory of the process
    it was forked from) and its reader's can be measured."""
    path = tmp_path / "in.parquet"
    data.hostile_parquet(path, values=40_000_000, count=1300)
    assert path.stat().st_size < 64 * 1024
    code = (
        "import json, resource, sys\n"
        "from pathlib import Path\n"
        "from streamflow.schema.store import SchemaStore\n"
        "from streamflow.score import inputs\n"
        "READING = SchemaStore([Path('tests/runtime/schemas')]).get('tests.runtime.Reading')\n"
        "read = inputs.read_rows(Path(sys.argv[1]), 'parquet', READING)\n"
        "rows = [(r.row, r.problem) for r in read]\n"
        "status = Path('/proc/self/status').read_text().split('VmHWM:')[1].split()[0]\n"
        "child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'rows': rows, 'peak_mib': max(int(status), child) // 1024}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(row, bool(problem)) for row, problem in outcome["rows"]] == [
        (0, False), (1, False), (2, False), (3, True), (4, True), (5, False),
    ]  # fmt: skip
    budget_mib = parquet_reader.MAX_READ_BYTES // MIB
    assert outcome["peak_mib"] < budget_mib + 512, outcome  # was 1.25 GiB more, per row


def test_a_reader_that_dies_costs_the_rest_of_its_row_group_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.parquet"
    data.write_groups(path, [data.rows([0, 1]), data.rows([2, 3]), data.rows([4])])
    real = parquet_reader._child_argv

    def dies_in_group_1(path: Path, first: int, budget: int) -> list[str]:
        if first > 1:
            return real(path, first, budget)
        # a reader that sends row group 0 and the start of 1, then is killed
        return [
            sys.executable, "-c",
            "import os, sys\n"
            "import pyarrow\n"
            "from streamflow.score import parquet_reader as p\n"
            "rows = pyarrow.RecordBatch.from_pylist\n"
            "out = sys.stdout.buffer\n"
            "p._send(out, b'G', b'0')\n"
            "p._send(out, b'R', p._dumps(rows([{'id': 'r0'}, {'id': 'r1'}])))\n"
            "p._send(out, b'G', b'1')\n"
            "p._send(out, b'R', p._dumps(rows([{'id': 'r2'}])))\n"
            "out.flush()\n"
            "os.abort()\n",
        ]  # fmt: skip

    monkeypatch.setattr(parquet_reader, "_child_argv", dies_in_group_1)
    rows = list(parquet_reader.read(path))
    assert [(n, doc["id"] if doc else None) for n, doc, _ in rows] == [
        (0, "r0"), (1, "r1"), (2, "r2"), (3, None), (4, "r4"),
    ]  # fmt: skip
    assert rows[3][2].startswith("row 3 (row group 1) is not read: the Parquet reader stopped")
