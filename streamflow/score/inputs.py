"""Reading the data set to score: Parquet, CSV or JSON lines, row by row.

Every row becomes a record of the input schema, or a reason it cannot: a CSV or
JSON line that does not parse, a value the schema refuses. A bad row is never
dropped quietly: it is reported with the row's number and goes to the
dead-letters file, so the rows written, the rows dead-lettered and the rows
rejected always add up to the rows read.

Rows are numbered from 0 in file order (blank JSON lines do not count); that
number is the ``row`` column of the results, and the ``streamflow-row`` header
that carries it through the application.
"""

from __future__ import annotations

import csv
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamflow.schema.codecs import DecodeError
from streamflow.schema.store import Schema
from streamflow.score import parquet_reader
from streamflow.streamlets.io import documents, reading

__all__ = [
    "FORMATS",
    "InputError",
    "InputRow",
    "converter",
    "count_rows",
    "data_format",
    "read_rows",
]

FORMATS = ("parquet", "csv", "jsonl")


class InputError(ValueError):
    """The data set cannot be read at all (not a row of it: the file)."""


@dataclass(frozen=True, slots=True)
class InputRow:
    """One row: the record to send, or why there is none (``problem``)."""

    row: int
    value: dict[str, Any] | None
    #: the row as read (a JSON-like document), kept for the dead-letters file
    doc: Any = None
    problem: str = ""
    #: False: ``value`` is the row as read, typed by its file (Parquet), and not yet
    #: checked against the schema; the encoder checks it, and ``converter`` explains
    #: why it fails or coerces it (an int in a string field, say)
    checked: bool = True


def data_format(path: Path, declared: str | None = None) -> str:
    """``parquet``, ``csv`` or ``jsonl``: as declared, else from the file's extension."""
    return reading.format_of(
        path,
        declared,
        accepted=FORMATS,
        how_to_set="pass --format parquet, csv or jsonl",
        error=InputError,
    )


def count_rows(path: Path, fmt: str) -> int:
    """How many rows ``read_rows`` will yield, read cheaply (Parquet's footer, lines)."""
    if fmt == "parquet":
        return int(_parquet_file(path).metadata.num_rows)
    with reading.open_text(path) as lines:
        if fmt == "csv":
            try:
                return max(sum(1 for _ in csv.reader(lines)) - 1, 0)  # less the header
            except csv.Error:
                return 0  # read_rows reports where the file stops being CSV
        return sum(1 for line in lines if line.strip())


def read_rows(path: Path, fmt: str, schema: Schema) -> Iterator[InputRow]:
    """Every row of the data set, as a record of ``schema`` or with its problem.

    JSON lines and CSV rows are converted here: their values are text and JSON
    types (bytes as base64, timestamps as ISO 8601), which only the schema can
    turn into Avro values. Parquet columns are typed already, so a Parquet row is
    passed on as read, unchecked: encoding it is the check, and only a row that
    fails it goes through :func:`converter` (which says why, or fixes it).
    """
    convert = converter(schema)
    typed = fmt == "parquet"
    for number, doc, problem in _documents(path, fmt, schema):
        if problem:
            yield InputRow(number, None, doc, problem)
        elif typed and isinstance(doc, dict):
            yield InputRow(number, doc, doc, checked=False)
        else:
            try:
                yield InputRow(number, convert(doc), doc)
            except DecodeError as exc:
                yield InputRow(number, None, doc, str(exc))


def converter(schema: Schema) -> Callable[[Any], dict[str, Any]]:
    """A document to a record of ``schema`` (coerced, cut to its fields), or DecodeError."""
    return documents.RecordConverter(schema, outlet="").convert


def _documents(path: Path, fmt: str, schema: Schema) -> Iterator[tuple[int, Any, str]]:
    if fmt == "parquet":
        _parquet_file(path)  # a file that is not Parquet is said plainly, here
        yield from parquet_reader.read(path)
        return
    with reading.open_text(path) as lines:
        for number, row in enumerate(reading.rows(lines, fmt=fmt, schema=schema)):
            where = f"line {row.line}: " if row.error else ""
            yield number, row.doc, where + row.error


def _parquet_file(path: Path) -> Any:
    try:
        # pyarrow comes with the drift extra; only Parquet needs it here
        parquet = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise InputError("reading Parquet needs pyarrow: pip install pyarrow") from None
    try:
        return parquet.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError...
        raise InputError(f"{path} is not a readable Parquet file: {exc}") from None
