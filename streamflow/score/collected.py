"""The results a run collected: the first result of each row, kept as it came.

An Avro output topic's results come in decoded batches of columns
(:class:`~streamflow.schema.columns.Columns`, one native call a batch), a JSON
topic's as records. :class:`Results` keeps both without turning either into
the other, so that writing Parquet from columns builds Arrow arrays straight
from numpy (:meth:`Results.arrow_table`); CSV, JSON lines and a test asking for
one row get records.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from streamflow.schema.column_values import python_values
from streamflow.schema.columns import Columns
from streamflow.score.arrow_arrays import from_numpy

__all__ = ["Results"]


class Results:
    """Results by row number; a row is added once (the caller keeps the first)."""

    def __init__(self) -> None:
        self._rows: set[int] = set()
        self._records: dict[int, dict[str, Any]] = {}
        self._batches: list[tuple[np.ndarray, Columns]] = []

    @classmethod
    def of(cls, records: Mapping[int, dict[str, Any]]) -> Results:
        """Results of records, by row."""
        results = cls()
        for row, record in records.items():
            results.add(row, record)
        return results

    def __contains__(self, row: object) -> bool:
        return row in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._rows))

    def add(self, row: int, record: dict[str, Any]) -> None:
        self._rows.add(row)
        self._records[row] = record

    def add_columns(self, rows: Sequence[int], columns: Columns) -> None:
        """``columns`` holds the results of ``rows``, in that order."""
        if len(rows) != columns.n:
            raise ValueError(f"{columns.n} results for {len(rows)} rows")
        if columns.n:
            self._rows.update(rows)
            self._batches.append((np.asarray(rows, dtype=np.int64), columns))

    def __getitem__(self, row: int) -> dict[str, Any]:
        if row in self._records:
            return self._records[row]
        for rows, columns in self._batches:
            (where,) = np.nonzero(rows == row)
            if len(where):
                return columns.to_records()[int(where[0])]
        raise KeyError(row)

    def items(self) -> list[tuple[int, dict[str, Any]]]:
        """Every result as ``(row, record)``, in row order."""
        pairs = list(self._records.items())
        for rows, columns in self._batches:
            pairs.extend(zip(rows.tolist(), columns.to_records(), strict=True))
        pairs.sort(key=lambda pair: pair[0])
        return pairs

    def arrow_table(self, row_name: str) -> Any:
        """The results as an Arrow table in row order, ``row_name`` first, built from the
        columns; None where they are not all columns of top-level fields (records, or
        nested records, which ``Table.from_pylist`` of :meth:`items` writes as structs)."""
        if self._records or not self._batches:
            return None
        names = list(self._batches[0][1].columns)
        if any("." in name for name in names) or any(
            list(columns.columns) != names for _, columns in self._batches
        ):
            return None
        arrow = importlib.import_module("pyarrow")
        rows = np.concatenate([rows for rows, _ in self._batches])
        order = np.argsort(rows, kind="stable")
        arrays = [from_numpy(rows[order])]
        for name in names:
            arrays.append(_arrow_column([c.columns[name] for _, c in self._batches], order))
        return arrow.Table.from_arrays(arrays, names=[row_name, *names])


def _arrow_column(parts: list[Any], order: np.ndarray) -> Any:
    """One column's batches as one Arrow array in ``order``, typed as ``from_pylist``
    types fastavro's values (:func:`~streamflow.score.arrow_arrays.from_numpy`)."""
    shapes = {(p.dtype.kind, p.ndim) if isinstance(p, np.ndarray) else None for p in parts}
    if len(shapes) == 1 and (shape := shapes.pop()) is not None and shape[1] == 1:
        masked = any(np.ma.isMaskedArray(p) for p in parts)
        joined = np.ma.concatenate(parts) if masked else np.concatenate(parts)  # type: ignore[no-untyped-call]
        array = from_numpy(joined[order])
        if array is not None:
            return array
    values = [v for part in parts for v in python_values(part, None)]
    return importlib.import_module("pyarrow").array([values[i] for i in order.tolist()])
