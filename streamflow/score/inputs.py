"""Reading the data set to score: Parquet, CSV or JSON lines, in batches of rows.

Every row becomes a record of the input schema, or a reason it cannot: a CSV or
JSON line that does not parse, a value the schema refuses. A bad row is never
dropped quietly: it is reported with the row's number and goes to the
dead-letters file, so the rows written, the rows dead-lettered and the rows
rejected always add up to the rows read.

Parquet comes in Arrow tables, a batch of rows each, typed by the file and not
yet checked: :mod:`streamflow.score.feed` encodes them as columns. CSV and JSON
lines come as rows already converted to records of the schema.

Rows are numbered from 0 in file order (blank JSON lines do not count); that
number is the ``row`` column of the results, and the ``streamflow-row`` header
that carries it through the application.
"""

from __future__ import annotations

import csv
import importlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from streamflow.schema.codecs import DecodeError
from streamflow.schema.store import Schema
from streamflow.score import parquet_reader
from streamflow.streamlets.io import documents, reading

__all__ = [
    "FORMATS",
    "InputBatch",
    "InputError",
    "InputRow",
    "Prefetch",
    "batched",
    "converter",
    "count_rows",
    "data_format",
    "read_batches",
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


@dataclass(frozen=True, slots=True)
class InputBatch:
    """Rows in file order: records (``rows``), or an Arrow table of the rows numbered
    ``first`` on, as read from Parquet and not yet checked against the schema."""

    first: int
    rows: Sequence[InputRow] = ()
    table: Any = None

    def __len__(self) -> int:
        return len(self.rows) if self.table is None else int(self.table.num_rows)

    def row(self, offset: int) -> InputRow:
        """One row of the batch as a record (of a table: as read, unchecked)."""
        if self.table is None:
            return self.rows[offset]
        (doc,) = self.table.slice(offset, 1).to_pylist()
        return InputRow(self.first + offset, doc, doc, checked=False)


def batched(rows: Iterable[InputRow], size: int = 1000) -> Iterator[InputBatch]:
    """Rows, in batches of ``size`` (the last one shorter)."""
    batch: list[InputRow] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield InputBatch(batch[0].row, batch)
            batch = []
    if batch:
        yield InputBatch(batch[0].row, batch)


class Prefetch:
    """Batches read on a thread of their own, a few ahead of the one being sent.

    Reading Parquet is mostly waiting: for the reader's child process to start, and
    for each batch to come down its pipe. On a thread, that waiting overlaps the
    run's own setup and sending. An error reading is raised where the batch it
    stopped would have been. Closing (leaving the ``with``) stops the thread and
    closes the source, which stops a child still reading.
    """

    _END = object()

    def __init__(self, batches: Iterator[InputBatch], *, ahead: int = 2) -> None:
        self._source = batches
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="score-input", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for batch in self._source:
                if not self._put(batch):
                    return
            self._put(self._END)
        except BaseException as exc:  # handed over, raised where the batch would have been
            self._put(exc)
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[InputBatch]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)  # a daemon: it cannot keep the process up

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


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


def read_batches(path: Path, fmt: str, schema: Schema) -> Iterator[InputBatch]:
    """Every row of the data set, in batches: Parquet's as Arrow tables (rows it could
    not read as rows with their problem), CSV's and JSON's as :func:`read_rows` gives."""
    if fmt != "parquet":
        yield from batched(read_rows(path, fmt, schema))
        return
    _parquet_file(path)  # a file that is not Parquet is said plainly, here
    for number, table, problem in parquet_reader.read_tables(path):
        if table is None:
            yield InputBatch(number, [InputRow(number, None, None, problem)])
        elif table.num_rows:
            yield InputBatch(number, table=table)


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
