"""Record values to batch tensors, and output tensors to field values.

Each function handles one input or output of a batch. Encoding raises on the
first value that does not fit (``MappingError``); :class:`.tensors.BoundMapping`
then goes record by record to name them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from streamflow.models.tensor_specs import (
    DTYPES,
    MappingError,
    TensorInput,
    TensorOutput,
)

__all__ = [
    "describe_error",
    "encode_input",
    "encode_input_columns",
    "merge_rows",
    "output_column",
    "spread_rows",
    "transform_output",
]


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"the record has no field {exc.args[0]!r}"
    return str(exc)


def encode_input(spec: TensorInput, values: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """One input tensor for a batch of record values (raises on the first bad one)."""
    if spec.stacked:
        rows = [[value[f] for f in spec.fields] for value in values]
        if any(x is None for row in rows for x in row):
            missing = next(f for v in values for f in spec.fields if v[f] is None)
            raise MappingError(f"field {missing!r} is null")
        return _cast(np.asarray(rows), spec.dtype, "+".join(spec.fields))
    return _encode_column(spec, [value[spec.field] for value in values])


def _encode_column(spec: TensorInput, column: list[Any]) -> np.ndarray:
    """One field's values (one per record) as the input tensor (raises on a bad one)."""
    field = spec.field
    if any(x is None for x in column):
        raise MappingError(f"field {field!r} is null")
    if spec.dtype in ("string", "bytes"):
        return _text(spec, column)
    if column and isinstance(column[0], bytes | bytearray):
        return _raw_tensors(spec, column)
    if spec.ragged:
        return _padded(spec, column)
    array = _cast(np.asarray(column), spec.dtype, field)
    if array.shape[1:] != spec.shape:
        bad = next(
            (i for i, x in enumerate(column) if np.shape(x) != spec.shape), 0
        )  # which record, for the message
        raise MappingError(
            f"field {field!r} has shape {list(np.shape(column[bad]))}; the mapping expects "
            f"{list(spec.shape)}"
        )
    return array


def encode_input_columns(spec: TensorInput, columns: Mapping[str, Any]) -> np.ndarray | None:
    """One input tensor straight from a batch's columns, or None when they are not plain
    numbers of the spec's shape (text, ragged, nulls, a field missing): the caller then
    goes through the records, which name each one that does not fit."""
    if spec.stacked:
        parts = [_numbers(columns.get(field)) for field in spec.fields]
        if any(part is None or part.ndim != 1 for part in parts):
            return None
        array = np.column_stack(parts)  # type: ignore[arg-type]
    else:
        column = columns.get(spec.field)
        found = _numbers(column)
        if found is None or spec.dtype in ("string", "bytes") or spec.ragged:
            # text, raw-bytes tensors, sequences: the per-record values, as on records
            if not isinstance(column, np.ndarray) or column.dtype != object:
                return None
            try:
                return _encode_column(spec, list(column))
            except (MappingError, ValueError, TypeError, OverflowError):
                return None
        if found.shape[1:] != spec.shape:
            return None
        array = found
    try:
        return _cast(array, spec.dtype, "+".join(spec.fields))
    except MappingError:
        return None


def _numbers(column: Any) -> np.ndarray | None:
    """A column of numbers with no nulls, as a plain array; None for anything else."""
    if isinstance(column, np.ma.MaskedArray):
        if np.ma.getmaskarray(column).any():
            return None
        column = column.data
    if not isinstance(column, np.ndarray) or column.dtype.kind not in "fiub":
        return None
    return column


def _cast(array: np.ndarray, dtype: str, field: str) -> np.ndarray:
    """``array`` as ``dtype``, refusing what the cast would change: fractions or values out
    of range for an integer input, anything but 0/1 for a bool one."""
    target = np.dtype(DTYPES[dtype])
    if array.dtype == object or array.dtype.kind in "US":
        raise MappingError(f"field {field!r} does not hold numbers of one shape")
    if target.kind in "iu" and array.dtype.kind in "fiub":
        if array.dtype.kind == "f" and not np.array_equal(array, np.floor(array)):
            raise MappingError(f"field {field!r} holds fractions; the mapping expects {dtype}")
        limits = np.iinfo(target)
        if array.size and (array.min() < limits.min or array.max() > limits.max):
            raise MappingError(f"field {field!r} holds values out of the range of {dtype}")
    if target.kind == "b" and array.dtype.kind != "b" and not np.isin(array, (0, 1)).all():
        raise MappingError(f"field {field!r} holds values other than 0 and 1 for a bool")
    return array.astype(target, copy=False)


def _text(spec: TensorInput, column: list[Any]) -> np.ndarray:
    kind = str if spec.dtype == "string" else bytes
    if spec.ragged:
        return _padded(spec, column)
    for x in column if not spec.shape else []:
        if not isinstance(x, kind):
            raise MappingError(f"field {spec.field!r} is a {type(x).__name__}, not {spec.dtype}")
    array = np.empty((len(column),), dtype=object)
    array[:] = column
    if spec.shape:
        array = np.asarray(column, dtype=object)
        if array.shape[1:] != spec.shape:
            raise MappingError(f"field {spec.field!r} does not have shape {list(spec.shape)}")
    return array


def _raw_tensors(spec: TensorInput, column: list[Any]) -> np.ndarray:
    """``bytes`` fields holding a little-endian tensor of the mapping's dtype and shape."""
    if spec.ragged:
        raise MappingError(f"field {spec.field!r}: a raw-bytes tensor needs a fixed shape")
    dtype = np.dtype(DTYPES[spec.dtype]).newbyteorder("<")
    size = int(np.prod(spec.shape, dtype=np.int64)) * dtype.itemsize
    for x in column:
        if not isinstance(x, bytes | bytearray) or len(x) != size:
            length = len(x) if isinstance(x, bytes | bytearray) else type(x).__name__
            raise MappingError(
                f"field {spec.field!r} holds {length} bytes; a {spec.dtype} tensor of shape "
                f"{list(spec.shape)} is {size} bytes"
            )
    flat = np.frombuffer(b"".join(column), dtype=dtype)
    return flat.reshape(len(column), *spec.shape).astype(DTYPES[spec.dtype])


def _padded(spec: TensorInput, column: list[Any]) -> np.ndarray:
    """Ragged sequences, cut to ``max_len`` and padded with ``pad`` to a common length."""
    inner = spec.shape[1:]
    text = spec.dtype in ("string", "bytes")
    rows = []
    for x in column:
        if not isinstance(x, list | tuple):
            raise MappingError(f"field {spec.field!r} is a {type(x).__name__}, not a sequence")
        row = np.asarray(x, dtype=object) if text else _cast(np.asarray(x), spec.dtype, spec.field)
        if row.ndim == 0 or row.shape[1:] != inner:
            raise MappingError(
                f"field {spec.field!r} has items of shape {list(row.shape[1:])}; "
                f"expected {list(inner)}"
            )
        rows.append(row[: spec.max_len] if spec.max_len else row)
    length = spec.max_len or max((len(r) for r in rows), default=0)
    out = np.full(
        (len(rows), length, *inner), spec.pad, dtype=object if text else DTYPES[spec.dtype]
    )
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def transform_output(spec: TensorOutput, tensor: np.ndarray) -> list[Any]:
    """The output field's value for each row of ``tensor``."""
    if spec.transform == "raw":
        if tensor.dtype == object:
            return [_text_value(x) for x in tensor.tolist()]
        kept = tensor if tensor.dtype.kind in "iub" else tensor.astype(np.float64)
        values: list[Any] = kept.tolist()
        return values
    flat = tensor.reshape(tensor.shape[0], -1).astype(np.float64)
    labels = spec.labels
    if labels and flat.shape[1] != len(labels) and spec.transform != "threshold":
        raise MappingError(
            f"output {spec.name!r} has {flat.shape[1]} values per record but {len(labels)} labels"
        )
    if spec.transform == "argmax":
        best = flat.argmax(axis=1).tolist()
        return [labels[i] for i in best] if labels else best
    if spec.transform == "top_k":
        k = min(spec.k, flat.shape[1])
        order = np.argsort(-flat, axis=1, kind="stable")[:, :k]
        return [
            [{"label": labels[i] if labels else str(i), "score": float(row[i])} for i in order_row]
            for row, order_row in zip(flat.tolist(), order.tolist(), strict=True)
        ]
    above = flat >= spec.threshold
    decided: list[Any] = above[:, 0].tolist() if flat.shape[1] == 1 else above.tolist()
    return decided


def output_column(spec: TensorOutput, tensor: np.ndarray) -> Any:
    """The output field as a column: :func:`transform_output`'s values, one row each
    (numbers stay arrays; labels, top-k lists and text are object arrays)."""
    if spec.transform == "raw":
        if tensor.dtype == object:
            return _objects(transform_output(spec, tensor))
        return tensor if tensor.dtype.kind in "iub" else tensor.astype(np.float64)
    if spec.transform == "argmax":
        flat = tensor.reshape(tensor.shape[0], -1)
        if spec.labels and flat.shape[1] != len(spec.labels):
            return _objects(transform_output(spec, tensor))  # raises, naming the output
        best = flat.argmax(axis=1)
        return np.asarray(spec.labels, dtype=object)[best] if spec.labels else best
    if spec.transform == "threshold":
        flat = tensor.reshape(tensor.shape[0], -1).astype(np.float64)
        above = flat >= spec.threshold
        return above[:, 0] if flat.shape[1] == 1 else above
    return _objects(transform_output(spec, tensor))


def _objects(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    for index, value in enumerate(values):
        column[index] = value  # one at a time: a list value stays one object
    return column


def _text_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_text_value(x) for x in value]
    return value


def merge_rows(n: int, parts: list[tuple[np.ndarray, dict[str, Any]]]) -> dict[str, Any]:
    """The columns of ``n`` rows from parts that each hold some rows (``rows``, their
    columns): a number column stays numbers, of the type both parts' fit in."""
    names = dict.fromkeys(name for _, columns in parts for name in columns)
    merged: dict[str, Any] = {}
    for name in names:
        pieces = [(rows, np.asarray(columns[name])) for rows, columns in parts if name in columns]
        shapes = {values.shape[1:] for _, values in pieces}
        column: np.ndarray
        if len(shapes) == 1:
            (shape,) = shapes
            dtype = np.result_type(*(values for _, values in pieces))
            if any(isinstance(values, np.ma.MaskedArray) for _, values in pieces):
                column = np.ma.masked_all((n, *shape), dtype)  # type: ignore[no-untyped-call]
            else:
                column = np.zeros((n, *shape), dtype)
            for rows, values in pieces:
                column[rows] = values
        else:  # arrays of another shape per model: a value per row, whatever it is
            column = np.empty(n, dtype=object)
            for rows, values in pieces:
                for row, value in zip(rows.tolist(), values, strict=True):
                    column[row] = value
        merged[name] = column
    return merged


def spread_rows(column: Any, rows: list[int], n: int) -> np.ndarray:
    """``column``'s values at ``rows`` of a column of ``n`` (the other rows left empty)."""
    values = np.asarray(column)
    spread = np.zeros((n, *values.shape[1:]), dtype=values.dtype)
    spread[rows] = values
    return spread
