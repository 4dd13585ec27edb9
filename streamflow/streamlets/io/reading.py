"""Reading records from JSONL and CSV files, once or following appends (``tail -f``).

The generator (a dataset), the file ingress (a feed), the monitoring
streamlets' reference datasets and `streamflow score` read files the same way,
so they share this module. Reading is split in three steps, each
testable alone:

1. *lines*: a file's lines, or, when following, every line appended to it,
   across truncation (``copytruncate``) and rotation (a new file at the path);
2. *rows*: each line parsed as JSON, or CSV rows (cells typed by the schema),
   tagged with their line number;
3. *records*: each row coerced and validated by a :class:`RecordConverter`;
   a bad one is logged with its line number, counted and skipped, because one
   bad line in a large file should not stop a pipeline.
"""

from __future__ import annotations

import csv
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from streamflow.schema.codecs import DecodeError
from streamflow.schema.store import Schema
from streamflow.streamlets.io import _cells, _jsontext, documents

__all__ = [
    "FORMATS",
    "Row",
    "RowReader",
    "file_format",
    "format_of",
    "generations",
    "open_text",
    "rows",
]

#: Accepted ``format`` parameter values; ``auto`` picks by file extension.
FORMATS = ("auto", "jsonl", "csv")
#: Every data file the project reads, by extension: the generator's and the file
#: ingress's (jsonl, csv), the monitoring streamlets' datasets and `streamflow score`'s
#: (parquet too). One table, so that a name means the same format to all of them.
EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}

Sleep = Callable[[float], None]


def open_text(path: str | Path) -> IO[str]:
    """A data file, for reading: bytes that are not UTF-8 are read as lone surrogates, so
    that the line holding them is refused (:func:`_jsontext.not_utf8`), not the file."""
    return open(path, encoding="utf-8", errors="surrogateescape", newline="")


@dataclass(frozen=True, slots=True)
class Row:
    """One parsed line (or CSV row): a JSON-like document, or why it could not be parsed."""

    line: int
    doc: Any = None
    error: str = ""


def format_of(
    name: str | Path,
    declared: str | None,
    *,
    accepted: Sequence[str],
    how_to_set: str,
    error: type[Exception] = ValueError,
) -> str:
    """One of ``accepted``: the declared format (``auto`` or none: not declared), else the
    one the extension of ``name`` (a path, or a URL's path) names. ``error`` says why not,
    ending with ``how_to_set`` (how this caller's user declares a format)."""
    if declared and declared != "auto":
        if declared not in accepted:
            raise error(f"unknown format {declared!r}: use one of {', '.join(accepted)}")
        return declared
    text = str(name)
    path = urllib.parse.urlsplit(text).path if "://" in text else text
    found = EXTENSIONS.get(PurePosixPath(path).suffix.lower())
    if found is None or found not in accepted:
        known = ", ".join(sorted(e for e, f in EXTENSIONS.items() if f in accepted))
        raise error(
            f"cannot tell the format of {text!r} from its extension ({known}): {how_to_set}"
        )
    return found


def file_format(path: str | Path, declared: str = "auto") -> str:
    """``jsonl`` or ``csv``: the declared format, else the one the extension names."""
    return format_of(
        path,
        declared,
        accepted=("jsonl", "csv"),
        how_to_set="set the format parameter to jsonl or csv",
    )


def generations(
    path: str | Path, *, follow: bool = False, poll: float = 0.5, sleep: Sleep = time.sleep
) -> Iterator[Iterator[str]]:
    """The lines of each successive file at ``path``: one file, or (following) each new one.

    A consumer must finish one generation's lines before asking for the next.
    """
    if not follow:
        with open_text(path) as whole:
            yield iter(whole)
        return
    while True:
        handle = _wait_open(Path(path), poll=poll, sleep=sleep)
        with handle:
            yield _tail(handle, Path(path), poll=poll, sleep=sleep)


def _wait_open(path: Path, *, poll: float, sleep: Sleep) -> IO[str]:
    while True:
        try:
            return open_text(path)
        except FileNotFoundError:
            sleep(poll)


def _tail(handle: IO[str], path: Path, *, poll: float, sleep: Sleep) -> Iterator[str]:
    """Complete lines as they are appended; ends when the file is truncated or replaced."""
    pending = ""
    while True:
        chunk = handle.readline()
        if chunk:
            pending += chunk
            if pending.endswith("\n"):
                yield pending
                pending = ""
            continue
        if _replaced(handle, path):
            if pending:  # the old file's last line, never ended with a newline
                yield pending
            return
        sleep(poll)


def _replaced(handle: IO[str], path: Path) -> bool:
    """Truncated below what we read, or a different file now at the path."""
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return False  # rotated away, nothing new yet: keep reading the old file
    opened = os.fstat(handle.fileno())
    return current.st_ino != opened.st_ino or current.st_size < handle.tell()


def rows(lines: Iterable[str], *, fmt: str, schema: Schema | None) -> Iterator[Row]:
    """The rows of one generation of lines, in the given format.

    A CSV row's cells are typed by ``schema``; without one (a monitoring streamlet's
    reference dataset, read by column) they stay text.
    """
    if fmt == "csv":
        return _csv_rows(lines, _cells.CsvCoercer(schema) if schema is not None else _TEXT)
    return _jsonl_rows(lines)


class _TextCells:
    """A CSV row's cells as they are written."""

    def row(self, cells: Mapping[str, str]) -> dict[str, Any]:
        return dict(cells)


_TEXT = _TextCells()


def _jsonl_rows(lines: Iterable[str]) -> Iterator[Row]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        error = _jsontext.not_utf8(line)
        if error:
            yield Row(number, error=error)
            continue
        try:
            yield Row(number, _jsontext.parse(line))
        except ValueError as exc:
            yield Row(number, error=str(exc))


def _csv_rows(lines: Iterable[str], coercer: _cells.CsvCoercer | _TextCells) -> Iterator[Row]:
    reader = csv.DictReader(lines, restkey=_EXTRA, restval=_MISSING)
    try:
        for column in reader.fieldnames or ():
            found = _jsontext.bad_byte(column)
            if found:  # a header that is not UTF-8 names no column anything can ask for
                yield Row(reader.line_num, error=f"not UTF-8: byte 0x{found[0]:02x} in the header")
                return
        for cells in reader:
            yield _csv_row(
                reader.line_num, cells, width=len(reader.fieldnames or ()), coercer=coercer
            )
    except csv.Error as exc:
        yield Row(reader.line_num, error=f"not valid CSV: {exc}")


_EXTRA = "\x00extra"
_MISSING = "\x00missing"


def _csv_row(
    number: int, cells: dict[str, Any], *, width: int, coercer: _cells.CsvCoercer | _TextCells
) -> Row:
    for column, text in cells.items():
        found = _jsontext.bad_byte(text) if isinstance(text, str) else None
        if found:
            return Row(number, error=f"not UTF-8: byte 0x{found[0]:02x} in column {column!r}")
    if _EXTRA in cells or _MISSING in cells.values():
        extra = len(cells.pop(_EXTRA, ()))
        missing = sum(1 for value in cells.values() if value == _MISSING)
        count = width - missing + extra
        return Row(number, error=f"the row has {count} cells, the header names {width}")
    return Row(number, coercer.row(cells))


class RowReader:
    """Rows to records of the schema; counts and logs the rows it skips."""

    def __init__(
        self, converter: documents.RecordConverter, *, logger: logging.Logger, source: str
    ) -> None:
        self.converter = converter
        self.logger = logger
        self.source = source
        self.records_read = 0
        self.rows_skipped = 0

    def records(self, parsed: Iterable[Row]) -> Iterator[dict[str, Any]]:
        for row in parsed:
            record = self._record(row)
            if record is not None:
                self.records_read += 1
                yield record

    def _record(self, row: Row) -> dict[str, Any] | None:
        if row.error:
            self._skip(row.line, row.error)
            return None
        try:
            return self.converter.convert(row.doc)
        except DecodeError as exc:
            self._skip(row.line, str(exc))
            return None

    def _skip(self, line: int, reason: str) -> None:
        self.rows_skipped += 1
        self.logger.warning(
            "%s:%d: skipped: %s (%d skipped so far)", self.source, line, reason, self.rows_skipped
        )
        return None
