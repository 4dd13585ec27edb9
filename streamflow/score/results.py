"""Writing what a run collected: the results in input order, and the dead letters apart.

The results file has one row per input row that came out, sorted by ``row`` (the
input's row number), then the output record's top-level fields. Its format
follows its extension, as the input's does: Parquet (through pyarrow), CSV or
JSON lines. Nested values go into CSV cells as JSON.

The dead-letters file is JSON lines, one per row that did not come out: its row
number, the stage that refused it (a streamlet, or ``input`` for a row the input
schema refused before it was sent), the error and its type, and, for a refused
row, the row as read.
"""

from __future__ import annotations

import base64
import csv
import importlib
import os
from pathlib import Path
from typing import Any

from streamflow.score.collected import Results
from streamflow.score.engine import DeadRow, Outcome
from streamflow.score.inputs import InputError, data_format
from streamflow.streamlets.io import documents

__all__ = ["dead_letters_path", "write_dead_letters", "write_results"]

ROW = "row"
# A lone surrogate (JSON's "\ud800" is a valid string no UTF-8 file can hold) is written
# as that escape: inside a JSON string, which is where JSON text holds one, it reads back.
_UNENCODABLE = "backslashreplace"


def dead_letters_path(results: Path) -> Path:
    """``scores.parquet`` -> ``scores.dead-letters.jsonl``, beside it."""
    return results.with_name(results.stem + ".dead-letters.jsonl")


def write_results(path: Path, outcome: Outcome, *, fmt: str | None = None) -> int:
    """Write the results in row order; returns how many rows were written."""
    fmt = data_format(path, fmt)
    partial = path.with_name(path.name + ".partial")
    if fmt == "parquet":
        _parquet(partial, outcome.results)
        os.replace(partial, path)
        return len(outcome.results)
    rows = [{ROW: row, **record} for row, record in outcome.results.items()]
    if fmt == "csv":
        _csv(partial, rows)
    else:
        with open(partial, "w", encoding="utf-8", errors=_UNENCODABLE) as out:
            for row in rows:
                out.write(documents.dumps(row) + "\n")
    os.replace(partial, path)
    return len(rows)


def write_dead_letters(path: Path, outcome: Outcome) -> int:
    """Write every dead row in row order (a file only if there is one); returns how many."""
    dead = [outcome.dead[row] for row in sorted(outcome.dead) if row not in outcome.results]
    if not dead:
        path.unlink(missing_ok=True)  # left over from an earlier run of the same name
        return 0
    with open(path, "w", encoding="utf-8", errors=_UNENCODABLE) as out:
        for letter in dead:
            out.write(documents.dumps(_dead_doc(letter)) + "\n")
    return len(dead)


def _dead_doc(letter: DeadRow) -> dict[str, Any]:
    doc: dict[str, Any] = {
        ROW: letter.row,
        "stage": letter.stage,
        "error": letter.error,
        "error_type": letter.error_type,
    }
    if letter.doc is not None:
        doc["input"] = letter.doc
    return doc


def _parquet(path: Path, results: Results) -> None:
    try:
        pyarrow = importlib.import_module("pyarrow")
        parquet = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise InputError("writing Parquet needs pyarrow: pip install pyarrow") from None
    table = results.arrow_table(ROW)  # straight from the columns, where they are columns
    if table is None:
        rows = [{ROW: row, **record} for row, record in results.items()]
        table = pyarrow.Table.from_pylist(rows) if rows else pyarrow.table({ROW: []})
    parquet.write_table(table, path)


def _csv(path: Path, rows: list[dict[str, Any]]) -> None:
    names = list(dict.fromkeys(name for row in rows for name in row)) or [ROW]
    with open(path, "w", encoding="utf-8", errors=_UNENCODABLE, newline="") as out:
        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
        writer.writerows(_flat(row) for row in rows)


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    return {name: _cell(value) for name, value in row.items()}


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return documents.dumps(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
