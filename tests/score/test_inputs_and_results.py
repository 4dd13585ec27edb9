"""Reading a data set and writing results: every row numbered, every bad row said, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamflow.schema.store import SchemaStore
from streamflow.score import inputs, results
from streamflow.score.collected import Results
from streamflow.score.engine import DeadRow, Outcome

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

STORE = SchemaStore([Path(__file__).parents[1] / "runtime" / "schemas"])
READING = STORE.get("tests.runtime.Reading")


def test_the_format_comes_from_the_extension_or_is_asked_for(tmp_path: Path) -> None:
    assert inputs.data_format(tmp_path / "a.PARQUET") == "parquet"
    assert inputs.data_format(tmp_path / "a.ndjson") == "jsonl"
    assert inputs.data_format(tmp_path / "a.txt", "csv") == "csv"
    with pytest.raises(inputs.InputError, match="pass --format parquet, csv or jsonl"):
        inputs.data_format(tmp_path / "a.txt")
    with pytest.raises(inputs.InputError, match="unknown format 'xls'"):
        inputs.data_format(tmp_path / "a.txt", "xls")


def test_json_lines_rows_are_numbered_blank_lines_skipped_and_bad_ones_said(
    tmp_path: Path,
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"id": "a", "seq": 1, "value": 1.5}\n'
        "\n"
        '{"id": "b", "seq": "x", "value": 2}\n'
        "{not json\n"
        '{"id": "c", "seq": 3, "value": 3, "unknown": true}\n'
    )
    assert inputs.count_rows(path, "jsonl") == 4
    rows = list(inputs.read_rows(path, "jsonl", READING))
    assert [r.row for r in rows] == [0, 1, 2, 3]
    assert rows[0].value == {"id": "a", "seq": 1, "value": 1.5, "poison": False}
    assert rows[1].value is None and "seq" in rows[1].problem
    assert rows[2].value is None and rows[2].problem.startswith("line 4: not valid JSON")
    assert rows[3].value is not None and "unknown" not in rows[3].value  # cut to the schema


def test_csv_cells_are_typed_by_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,seq,value\na,1,1.5\n"b, quoted",2,2\nc,three,3\nd,4\n')
    assert inputs.count_rows(path, "csv") == 4
    rows = list(inputs.read_rows(path, "csv", READING))
    assert rows[0].value == {"id": "a", "seq": 1, "value": 1.5, "poison": False}
    assert rows[1].value is not None and rows[1].value["id"] == "b, quoted"
    assert rows[2].value is None and rows[2].problem
    assert rows[3].value is None and "cells" in rows[3].problem


def test_parquet_rows_go_to_the_encoder_unchecked(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "a", "seq": 1, "value": 1.5}] * 3), path)
    assert inputs.count_rows(path, "parquet") == 3
    rows = list(inputs.read_rows(path, "parquet", READING))
    assert [(r.row, r.checked) for r in rows] == [(0, False), (1, False), (2, False)]


def test_a_file_that_is_not_parquet_is_said_plainly(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    path.write_text("id,seq\n")
    with pytest.raises(inputs.InputError, match="not a readable Parquet file"):
        inputs.count_rows(path, "parquet")


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_results_are_written_in_row_order_and_dead_letters_apart(
    tmp_path: Path, suffix: str
) -> None:
    outcome = Outcome(
        results=Results.of({2: {"id": "c", "p": [0.5, 0.5]}, 0: {"id": "a", "p": [1.0, 0.0]}}),
        dead={1: DeadRow(1, "input", "seq: expected a long", "InvalidRow", doc={"id": "b"})},
    )
    out = tmp_path / f"scores{suffix}"
    assert results.write_results(out, outcome) == 2
    if suffix == ".parquet":
        table = pq.read_table(out).to_pydict()
        assert table == {"row": [0, 2], "id": ["a", "c"], "p": [[1.0, 0.0], [0.5, 0.5]]}
    elif suffix == ".csv":
        assert out.read_text().splitlines() == ["row,id,p", '0,a,"[1.0,0.0]"', '2,c,"[0.5,0.5]"']
    else:
        assert [json.loads(line)["row"] for line in out.read_text().splitlines()] == [0, 2]
    dead_path = results.dead_letters_path(out)
    assert dead_path.name == "scores.dead-letters.jsonl"
    assert results.write_dead_letters(dead_path, outcome) == 1
    assert json.loads(dead_path.read_text()) == {
        "row": 1,
        "stage": "input",
        "error": "seq: expected a long",
        "error_type": "InvalidRow",
        "input": {"id": "b"},
    }
