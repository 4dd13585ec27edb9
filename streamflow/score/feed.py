"""The rows of a data set as the input topic's bytes, a batch at a time.

A Parquet batch arrives as an Arrow table. Its columns go to the native
columnar encoder in one call (:class:`~streamflow.schema.columns.ColumnCodec`):
numbers, booleans, timestamps and dates as numpy arrays (masked where a value
is null), every other column as the Python values ``to_pylist`` gives. Only a
row the encoder refuses is taken out of the table as a record and goes the
per-record way, which is the check: encoded by the topic's codec as it is, or
coerced by the schema (an int in a string column, say), or refused with every
reason. So a table gives exactly the bytes its rows would give one by one, and
a bad row fails alone.

CSV and JSON rows, converted already, and the rows of a topic whose codec has
no column form (JSON), are encoded one by one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamflow.schema.codecs import Codec, DecodeError, EncodeError
from streamflow.schema.columns import ColumnCodec
from streamflow.score.arrow_arrays import to_numpy
from streamflow.score.inputs import InputBatch, InputRow

__all__ = ["Encoded", "Feed", "arrow_columns"]


@dataclass
class Encoded:
    """A batch's rows as bytes (``None`` for a row refused), and why each refused row was."""

    rows: Sequence[int]  # the rows' numbers
    values: list[bytes | None]
    #: (row number, the row as read, why): rows that never go in
    refused: list[tuple[int, Any, str]] = field(default_factory=list)


class Feed:
    """Encodes batches for one input topic; ``convert`` coerces a row the codec refused."""

    def __init__(
        self, codec: Codec, convert: Callable[[Any], dict[str, Any]] | None = None
    ) -> None:
        self.codec, self.convert = codec, convert
        self.columns = ColumnCodec.for_codec(codec)

    def encode(self, batch: InputBatch) -> Encoded:
        if batch.table is None:
            out = Encoded([row.row for row in batch.rows], [])
        else:
            out = Encoded(range(batch.first, batch.first + len(batch)), [])
        if batch.table is not None and self.columns is not None:
            columns = arrow_columns(batch.table, self.columns.schema.raw)
            if columns is not None:
                out.values, errors = self.columns.encode(columns, len(batch))
                for offset, _why in errors:  # the record's own way says why, or mends it
                    out.values[offset] = self._one(batch.row(offset), out)
                return out
        rows = (
            batch.rows
            if batch.table is None
            else [
                InputRow(batch.first + i, doc, doc, checked=False)
                for i, doc in enumerate(batch.table.to_pylist())
            ]
        )
        out.values = [self._one(row, out) for row in rows]
        return out

    def _one(self, row: InputRow, out: Encoded) -> bytes | None:
        """One row's bytes, or None: refused, and recorded in ``out`` as such."""
        if row.value is None:
            out.refused.append((row.row, row.doc, row.problem))
            return None
        try:
            return self.codec.encode(row.value)
        except EncodeError as exc:
            if row.checked or self.convert is None:
                out.refused.append((row.row, row.doc, str(exc)))
                return None
        try:
            return self.codec.encode(self.convert(row.doc))
        except (DecodeError, EncodeError) as exc:
            out.refused.append((row.row, row.doc, str(exc)))
            return None


def arrow_columns(table: Any, schema: dict[str, Any]) -> dict[str, Any] | None:
    """A table's columns by the record ``schema``'s field names, as the column encoder
    takes them; a field the table lacks is its default, or None, as fastavro writes a
    dict without it. None: a table whose rows are not plain records (repeated names)."""
    names = table.column_names
    if len(set(names)) != len(names):
        return None  # which of two columns a row's dict keeps is to_pylist's to say
    n, out = table.num_rows, {}
    for spec in schema["fields"]:
        name = spec["name"]
        if name in names:
            out[name] = _column(table.column(name), _logical(spec["type"]))
        else:
            out[name] = [spec.get("default")] * n
    return out


def _column(column: Any, logical: str | None) -> Any:
    """numpy for fixed-width numbers, and for times and dates going into a field of their
    own kind; the Python values for the rest. A timestamp without a time zone is left to
    fastavro, which reads it in the machine's local time, as the rows always were."""
    types = importlib.import_module("pyarrow").types
    kind = column.type
    if types.is_timestamp(kind) and (kind.tz is None or logical not in _TIMESTAMPS):
        return column.to_pylist()
    if types.is_date32(kind) and logical != "date":
        return column.to_pylist()
    chunks = column.chunks
    if chunks:
        values = to_numpy(chunks[0] if len(chunks) == 1 else column.combine_chunks())
        if values is not None:
            return values
    return column.to_pylist()


_TIMESTAMPS = ("timestamp-millis", "timestamp-micros")


def _logical(kind: Any) -> str | None:
    """The logical type of a field's type, through a union with null."""
    if isinstance(kind, list):
        branches = [b for b in kind if b != "null"]
        kind = branches[0] if len(branches) == 1 else None
    return kind.get("logicalType") if isinstance(kind, dict) else None
