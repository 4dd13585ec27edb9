"""A batch as columns: what a streamlet with ``process_columns`` reads and returns.

A streamlet with one inlet may define ``process_columns(batch)`` instead of
``process``/``process_batch``; it writes one outlet (the only one, or the one its
class attribute ``columns_outlet`` names; other outlets take what it writes outside
its batches, as a control reaction). Its batch is a :class:`ColumnBatch`: the
inlet's records decoded straight into columns (numpy arrays for numbers, n-dimensional
arrays for fixed-shape nested arrays, object arrays for text; see
:mod:`streamflow.schema.columns`), with no dict per record on the way. It returns the
outlet's columns, one row per row of the batch, as a mapping or a
:class:`ColumnResult` (which can also fail single rows and set headers)::

    class Scale(Streamlet):
        inp = Inlet("in", "examples.Reading")
        out = Outlet("out", "examples.Scaled")

        def process_columns(self, batch: ColumnBatch) -> dict[str, Any]:
            return {"id": batch["id"], "value": batch["value"] * 2.0}

Each output row keeps its input's key and lineage, as a plain ``process`` result does.
A record that does not decode is a dead letter before the batch is made; a row named in
``ColumnResult.errors``, or one whose values do not fit the outlet's schema, is one after;
the rest of the batch is written. Raising fails the whole call: the batch is then run
again one row at a time, so only the rows that raise alone become dead letters.
``Backpressure`` hands the batch back, as for any logic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ColumnBatch", "ColumnResult", "take"]


class ColumnBatch(Mapping[str, Any]):
    """One batch of an inlet's records as columns, by field name (nested: ``"a.b"``)."""

    __slots__ = ("_columns", "_records", "inlet", "n")

    def __init__(
        self,
        inlet: str,
        columns: Mapping[str, Any],
        n: int,
        records: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.inlet = inlet
        self.n = n
        self._columns = columns
        self._records = records

    def __getitem__(self, name: str) -> Any:
        return self._columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def records(self) -> list[dict[str, Any]]:
        """The rows as record values (dicts), as ``process_batch`` would see them: for
        the parts of a streamlet that are easier to write per record."""
        return self._records()

    def take(self, rows: Sequence[int]) -> ColumnBatch:
        """The batch of only these rows, in this order."""
        index = np.asarray(rows, dtype=np.int64)
        columns = {name: take(column, index) for name, column in self._columns.items()}
        everything = self._records
        return ColumnBatch(
            self.inlet, columns, len(index), lambda: [everything()[i] for i in index.tolist()]
        )

    def __repr__(self) -> str:
        return f"ColumnBatch({self.inlet!r}, n={self.n}, columns={list(self._columns)})"


class ColumnResult:
    """What ``process_columns`` returns when it needs more than the columns.

    ``errors``: rows (by index in the batch) that failed, with why; they become dead
    letters and have no output, whatever their columns hold. ``headers``: set on every
    output record of the batch.
    """

    __slots__ = ("columns", "errors", "headers")

    def __init__(
        self,
        columns: Mapping[str, Any],
        *,
        errors: Mapping[int, BaseException] | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> None:
        self.columns = columns
        self.errors = dict(errors or {})
        self.headers = dict(headers or {})


def take(column: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of one column: a numpy array (masked ones too) or a sequence."""
    if isinstance(column, np.ndarray):
        return column[index]
    values = list(column)
    out = np.empty(len(index), dtype=object)
    for place, row in enumerate(index.tolist()):
        out[place] = values[row]  # one at a time: a list value must stay one object
    return out
