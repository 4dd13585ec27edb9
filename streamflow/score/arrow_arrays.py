"""Arrow arrays to numpy and back through their buffers, for the columns that allow it.

pyarrow's own ``to_numpy`` and ``pa.array`` import pandas the first time they
run (to ask whether what they were given is pandas'), which costs a scoring run
a third of a second before its first row. Built from the buffers, fixed-width
columns (numbers, booleans, timestamps, dates) and text and bytes need no
pandas, and numbers need no copy either. Anything else is left to pyarrow.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

__all__ = ["from_numpy", "to_numpy"]


def _arrow() -> Any:
    return importlib.import_module("pyarrow")


def to_numpy(array: Any) -> np.ndarray | None:
    """A fixed-width Arrow array as numpy (masked where a value is null): integers but
    uint64, floats, booleans, timestamps (``datetime64`` in their unit) and dates
    (``datetime64[D]``); None for any other type."""
    types = _arrow().types
    kind, n, offset = array.type, len(array), array.offset
    buffers = array.buffers()
    if len(buffers) != 2 or buffers[1] is None:
        return None
    validity, data = buffers
    if types.is_boolean(kind):
        values: np.ndarray = _bits(data, offset, n)
    elif types.is_integer(kind) and not types.is_uint64(kind):
        code = "i" if types.is_signed_integer(kind) else "u"
        values = _fixed(data, f"{code}{kind.bit_width // 8}", offset, n)
    elif types.is_floating(kind):
        values = _fixed(data, f"f{kind.bit_width // 8}", offset, n)
    elif types.is_timestamp(kind):
        values = _fixed(data, "i8", offset, n).view(f"datetime64[{kind.unit}]")
    elif types.is_date32(kind):
        values = _fixed(data, "i4", offset, n).astype("datetime64[D]")
    else:
        return None
    if not array.null_count:
        return values
    return np.ma.MaskedArray(values, mask=~_bits(validity, offset, n))


def from_numpy(column: np.ndarray) -> Any:
    """A 1-D numpy column as an Arrow array, typed as ``Table.from_pylist`` types the
    same values in Python: integers int64, floats float64, times in microseconds (UTC),
    dates date32, text string, bytes binary; None where it is something else (an object
    column of other values, an n-d array, a column of nulls only)."""
    arrow = _arrow()
    mask = np.ma.getmaskarray(column) if np.ma.isMaskedArray(column) else None
    data = np.asarray(np.ma.getdata(column))
    if data.ndim != 1:
        return None
    n = len(data)
    if mask is not None and n and mask.all():
        return None  # all null: pyarrow's null type, as from_pylist gives
    validity = None if mask is None or not mask.any() else _packed(~mask)
    kind = data.dtype.kind
    if kind in "iu":
        return _from(arrow.int64(), n, validity, data.astype(np.int64))
    if kind == "f":
        return _from(arrow.float64(), n, validity, data.astype(np.float64))
    if kind == "b":
        return _from(arrow.bool_(), n, validity, _packed(data))
    if kind == "M":
        if np.datetime_data(data.dtype)[0] == "D":
            return _from(arrow.date32(), n, validity, data.astype(np.int32))
        micros = data.astype("datetime64[us]").view(np.int64)
        return _from(arrow.timestamp("us", tz="UTC"), n, validity, micros)
    if kind == "O":
        return _text(data, mask)
    return None


def _text(values: np.ndarray, mask: np.ndarray | None) -> Any:
    """An object column of str (or of bytes), None standing for null, as one Arrow array."""
    arrow = _arrow()
    null = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    if mask is not None:
        null |= mask
    present = values[~null].tolist()
    if not present:
        return None  # all null: pyarrow's null type, as from_pylist gives
    try:
        if all(isinstance(v, str) for v in present):
            kind, encoded = arrow.string(), [v.encode("utf-8") for v in present]
        elif all(isinstance(v, bytes) for v in present):
            kind, encoded = arrow.binary(), present
        else:
            return None
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 text, which pyarrow says
        return None
    lengths = np.zeros(len(values), dtype=np.int64)
    lengths[~null] = [len(v) for v in encoded]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    if offsets[-1] >= 2**31:
        return None  # past a 32-bit offset: pyarrow's large types
    validity = _packed(~null) if null.any() else None
    buffers = [
        None if validity is None else arrow.py_buffer(validity),
        arrow.py_buffer(offsets.astype(np.int32)),
        arrow.py_buffer(b"".join(encoded)),
    ]
    return arrow.Array.from_buffers(kind, len(values), buffers)


def _from(kind: Any, n: int, validity: np.ndarray | None, data: np.ndarray) -> Any:
    arrow = _arrow()
    bits = None if validity is None else arrow.py_buffer(validity)
    return arrow.Array.from_buffers(kind, n, [bits, arrow.py_buffer(np.ascontiguousarray(data))])


def _fixed(buffer: Any, dtype: str, offset: int, n: int) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.dtype(dtype).newbyteorder("<"), count=offset + n)[offset:]


def _bits(buffer: Any, offset: int, n: int) -> np.ndarray:
    raw = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(raw, count=offset + n, bitorder="little")[offset:].astype(bool)


def _packed(flags: np.ndarray) -> np.ndarray:
    return np.packbits(flags.astype(bool), bitorder="little")
