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

A streamlet that needs more than one inlet, keys or state keeps ``process_batch`` and
can still read an inlet as columns: name it in ``column_inlets``, and the runtime
decodes that inlet's records of each batch in one call, into columns and into the
records' values alike. :func:`columns_of` gives the columns of any run of those
records, in their order::

    class Watch(Streamlet):
        inp = Inlet("in", "examples.Reading")
        labels = Inlet("labels", "examples.Label")
        column_inlets = ("in",)

        def process_batch(self, records):
            readings = [r for r in records if r.inlet == "in"]
            batch = columns_of(readings)  # None for records built by hand
            values = batch["value"] if batch is not None else [r.value["value"] for r in readings]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from streamflow.api.ports import Inlet
from streamflow.api.streamlet import Record

__all__ = [
    "ColumnBatch",
    "ColumnRecord",
    "ColumnResult",
    "Place",
    "columns_of",
    "read_as_columns",
    "take",
]


class Place(NamedTuple):
    """Where a row of a batch was read: its Kafka key, topic, partition and offset."""

    key: bytes | None
    topic: str
    partition: int
    offset: int


class ColumnBatch(Mapping[str, Any]):
    """One batch of an inlet's records as columns, by field name (nested: ``"a.b"``)."""

    __slots__ = ("_columns", "_keys", "_made", "_places", "_records", "inlet", "n")

    def __init__(
        self,
        inlet: str,
        columns: Mapping[str, Any],
        n: int,
        records: Callable[[], list[dict[str, Any]]],
        places: Callable[[], list[Place]] | None = None,
        keys: Callable[[], list[bytes | None]] | None = None,
    ) -> None:
        """``places`` and ``keys``: each row's key and where it was read, when the rows
        came from Kafka (the runtime's batches); made only when asked for."""
        self.inlet = inlet
        self.n = n
        self._columns = columns
        self._records = records
        self._places = places
        self._keys = keys
        self._made: list[dict[str, Any]] | None = None

    def __getitem__(self, name: str) -> Any:
        return self._columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def records(self) -> list[dict[str, Any]]:
        """The rows as record values (dicts), as ``process_batch`` would see them: for
        the parts of a streamlet that are easier to write per record. They are made
        once, when first asked for."""
        return list(self._rows())

    def record(self, row: int) -> dict[str, Any]:
        """One row as a record value (the batch's rows are all made then)."""
        return self._rows()[row]

    def _rows(self) -> list[dict[str, Any]]:
        if self._made is None:
            self._made = self._records()
        return self._made

    def take(self, rows: Sequence[int]) -> ColumnBatch:
        """The batch of only these rows, in this order (each column taken when first read)."""
        index = np.asarray(rows, dtype=np.int64)
        made, places, keys = self._rows, self._places, self._keys
        rows_of = index.tolist()
        return ColumnBatch(
            self.inlet,
            _Taken(self._columns, index),
            len(index),
            lambda: [made()[i] for i in rows_of],
            None if places is None else lambda: [places()[i] for i in rows_of],
            None if keys is None else lambda: [keys()[i] for i in rows_of],
        )

    def kafka_keys(self) -> list[bytes | None]:
        """Each row's Kafka key (None: it has none), without the rest of :meth:`places`."""
        if self._keys is not None:
            return self._keys()
        return [place.key for place in self.places()]

    def places(self) -> list[Place]:
        """Each row's Kafka key and where it was read (topic, partition, offset).
        LookupError for a batch built by hand: its rows were read from nowhere."""
        if self._places is None:
            raise LookupError("this batch was not read from Kafka: its rows have no keys")
        return self._places()

    def __repr__(self) -> str:
        return f"ColumnBatch({self.inlet!r}, n={self.n}, columns={list(self._columns)})"


class ColumnResult:
    """What ``process_columns`` returns when it needs more than the columns.

    ``errors``: rows (by index in the batch) that failed, with why; they become dead
    letters and have no output, whatever their columns hold. ``headers``: set on every
    output record of the batch; a header whose value is a sequence (one value per row)
    differs by row, and a row whose value is None has none. ``outlets``: what other
    outlets get of the same rows, as results of their own (a row each, keyed and with
    lineage as the batch's outputs are); a row that fails there is dropped and counted,
    never a dead letter: its input was served.
    """

    __slots__ = ("columns", "errors", "headers", "outlets")

    def __init__(
        self,
        columns: Mapping[str, Any],
        *,
        errors: Mapping[int, BaseException] | None = None,
        headers: Mapping[str, str | bytes | Sequence[str | bytes | None]] | None = None,
        outlets: Mapping[str, ColumnResult] | None = None,
    ) -> None:
        self.columns = columns
        self.errors = dict(errors or {})
        self.headers = dict(headers or {})
        self.outlets = dict(outlets or {})


class _Taken(Mapping[str, Any]):
    """Some rows of a batch's columns, each column taken when first read."""

    __slots__ = ("_columns", "_index", "_made")

    def __init__(self, columns: Mapping[str, Any], index: np.ndarray) -> None:
        self._columns = columns
        self._index = index
        self._made: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        made = self._made.get(name)
        if made is None:
            made = self._made[name] = take(self._columns[name], self._index)
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)


def take(column: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of one column: a numpy array (masked ones too) or a sequence."""
    if isinstance(column, np.ndarray):
        return column[index]
    values = list(column)
    out = np.empty(len(index), dtype=object)
    for place, row in enumerate(index.tolist()):
        out[place] = values[row]  # one at a time: a list value must stay one object
    return out


def columns_of(records: Sequence[Record]) -> ColumnBatch | None:
    """The columns of these records, in their order, where the runtime decoded them as
    columns (their inlet is in the streamlet's ``column_inlets``) in one batch: the
    batch itself when they are all of it, in order, else its rows of them. None for an
    empty list, records of another inlet or batch, or records not read from Kafka."""
    if not records:
        return None
    batch: ColumnBatch | None = None
    rows: list[int] = []
    for record in records:
        found = getattr(record, "_column_row", None)
        if found is None or (batch is not None and found[0] is not batch):
            return None
        batch = found[0]
        rows.append(found[1])
    assert batch is not None
    if len(rows) == batch.n and rows == list(range(batch.n)):
        return batch
    return batch.take(rows)


def read_as_columns(cls: type, *names: str) -> None:
    """For a base streamlet whose subclasses bind its inlets: set ``cls.column_inlets`` to
    those of ``names`` that ``cls`` binds as data inlets (call it from
    ``__init_subclass__``). A class that sets ``column_inlets`` itself keeps its own."""
    if "column_inlets" in vars(cls):
        return
    bound = {
        port.name
        for klass in cls.__mro__
        for port in vars(klass).values()
        if isinstance(port, Inlet)
    }
    cls.column_inlets = tuple(n for n in names if n in bound)  # type: ignore[attr-defined]


_VALUE: Any = Record.__dict__["value"]  # the slot a record's value is kept in


class ColumnRecord(Record):
    """A record of a column inlet (see ``column_inlets``): its row of the batch's columns,
    whose ``value`` is made a dict only when first read. Logic that reads the columns
    (:func:`columns_of`) and never the values pays for no dict at all. Setting ``value``
    parts the record from its columns; changing the dict in place does not."""

    __slots__ = ()

    @classmethod
    def of_row(
        cls,
        message: Any,
        batch: ColumnBatch,
        row: int,
        *,
        topic: str,
        partition: int,
    ) -> ColumnRecord:
        record = cls.__new__(cls)
        record.inlet = batch.inlet
        record.topic = topic
        record.partition = partition
        record._message = message
        record._column_row = (batch, row)
        return record

    @property  # the slot, filled when first read
    def value(self) -> dict[str, Any]:
        try:
            found: dict[str, Any] = _VALUE.__get__(self, Record)
            return found
        except AttributeError:
            batch, row = self._column_row
            made: dict[str, Any] = batch.record(row)
            _VALUE.__set__(self, made)
            return made

    @value.setter
    def value(self, value: dict[str, Any]) -> None:
        """A value set by the logic is the record's from then on: it has no columns."""
        _VALUE.__set__(self, value)
        with contextlib.suppress(AttributeError):  # parted already
            del self._column_row
