"""Datasets for the monitoring streamlets: JSONL, CSV or Parquet, from an allowlisted location.

A drift detector compares windows with a reference dataset, and an explainer
may take its background from one. Either comes from a dataset named by location, so
it goes through the same gate as a model artifact
(:func:`streamflow.models.artifacts.fetch`): the location must
match the allowlist before anything is read, the bytes must match the
sha256 when one is given (a model artifact's location needs one; a dataset's
may omit it), and the file is cached by digest.

The dataset is read into the columns that were asked for, and nothing else.
A column that is missing is an error that names what the file does have,
because "the reference does not match the records" is the usual mistake.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streamflow.models import artifacts
from streamflow.streamlets.io import reading

__all__ = ["FORMATS", "Columns", "DatasetError", "dataset_format", "load_columns", "read_columns"]

FORMATS = ("auto", "jsonl", "csv", "parquet")

#: Column name -> values: float64 arrays for numeric columns, lists of str for categorical ones.
Columns = dict[str, Any]


class DatasetError(Exception):
    """A reference dataset that cannot be read or does not fit the records."""


def dataset_format(location: str, declared: str = "auto") -> str:
    """jsonl, csv or parquet: the declared format, else the one the location's extension names."""
    return reading.format_of(
        location,
        declared,
        accepted=FORMATS[1:],
        how_to_set="set the reference format",
        error=DatasetError,
    )


def load_columns(
    *,
    location: str,
    sha256: str | None,
    allowlist: Sequence[str],
    cache_dir: Path,
    numeric: Sequence[str],
    categorical: Sequence[str] = (),
    fmt: str = "auto",
    timeout: float = 30.0,
) -> Columns:
    """The dataset at ``location`` (checked, verified, cached) as the named columns."""
    chosen = dataset_format(location, fmt)
    try:
        path = artifacts.fetch(
            data=None,
            location=location,
            sha256=sha256,
            allowlist=allowlist,
            cache_dir=cache_dir,
            timeout=timeout,
            # a dataset's digest stays optional (a model artifact's is not); when given,
            # it must be a digest and match
            require_sha256=False,
        )
    except artifacts.ArtifactError as exc:
        raise DatasetError(f"reference dataset: {exc}") from None
    return read_columns(path.read_bytes(), fmt=chosen, numeric=numeric, categorical=categorical)


def read_columns(
    data: bytes, *, fmt: str, numeric: Sequence[str], categorical: Sequence[str] = ()
) -> Columns:
    """Parse a dataset's bytes and keep the named columns."""
    rows = _records(data, fmt)
    available = rows.keys()
    missing = [name for name in (*numeric, *categorical) if name not in available]
    if missing:
        has = ", ".join(sorted(available)) or "no columns"
        raise DatasetError(
            f"the reference dataset has no column {', '.join(repr(m) for m in missing)} "
            f"(it has: {has}); its features must match the records'"
        )
    columns: Columns = {}
    for name in numeric:
        try:
            columns[name] = np.array([_number(v) for v in rows[name]], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"reference column {name!r} is not numeric: {exc}") from None
    for name in categorical:
        columns[name] = [str(v) for v in rows[name]]
    if not any(len(v) for v in columns.values()) and (numeric or categorical):
        raise DatasetError("the reference dataset has no rows")
    return columns


def _records(data: bytes, fmt: str) -> dict[str, list[Any]]:
    """Column-wise values of every row; the first row that cannot be read is an error.

    JSON lines and CSV are read as every other data file is (:func:`reading.rows`),
    with CSV cells kept as text: a column is typed when it is taken (numbers here).
    """
    if fmt == "parquet":
        return _parquet(data)
    if fmt not in ("csv", "jsonl"):
        raise DatasetError(f"unknown dataset format {fmt!r}: use one of {', '.join(FORMATS)}")
    text = data.decode("utf-8-sig", errors="surrogateescape")
    docs: list[dict[str, Any]] = []
    for row in reading.rows(io.StringIO(text, newline=""), fmt=fmt, schema=None):
        if row.error:
            raise DatasetError(f"reference line {row.line}: {row.error}")
        if not isinstance(row.doc, dict):
            raise DatasetError(f"reference line {row.line} is not a JSON object")
        docs.append(row.doc)
    names = {k for doc in docs for k in doc} if docs else set()
    return {name: [doc.get(name) for doc in docs] for name in names}


def _parquet(data: bytes) -> dict[str, list[Any]]:
    try:
        # pyarrow is optional (only Parquet needs it), so it is imported by name
        parquet = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise DatasetError("reading a Parquet dataset needs pyarrow: pip install pyarrow") from None
    try:
        table = parquet.read_table(io.BytesIO(data))
    except Exception as exc:
        raise DatasetError(f"not a readable Parquet file: {exc}") from None
    return {str(name): list(values) for name, values in table.to_pydict().items()}


def _number(value: Any) -> float:
    if value is None or value == "":
        return float("nan")
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean")
    return float(value)
