"""The bytes of a state value, in the local store and in the changelog.

msgpack carries what JSON would, plus bytes, and extension types carry what
the drift and explain streamlets keep: numpy arrays (numbers as their raw
buffer, strings and other objects as a nested list) and tuples, so a value
reads back as the type it was written. Nothing here can build an arbitrary
object, so a changelog written by someone else can at worst be refused.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

__all__ = ["decode", "encode"]

_TUPLE, _ARRAY, _OBJECTS = 1, 2, 3


def encode(value: Any) -> bytes:
    """The value's bytes; TypeError, naming what is not storable, when it is not."""
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"not a storable state value: {exc}") from None


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_extension, use_bin_type=True, strict_types=True)  # type: ignore[no-any-return]


def decode(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_restore, raw=False, strict_map_key=False)


def _extension(value: Any) -> Any:
    """What msgpack cannot pack as it is (``strict_types``: subclasses come here too)."""
    if isinstance(value, tuple):
        return msgpack.ExtType(_TUPLE, _pack(list(value)))
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biufc":
            body = [value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes()]
            return msgpack.ExtType(_ARRAY, _pack(body))
        if value.dtype.kind in "OU":
            return msgpack.ExtType(_OBJECTS, _pack([list(value.shape), value.ravel().tolist()]))
    if isinstance(value, np.generic):
        return value.item()  # a numpy scalar: the Python number, string or bool it holds
    bases: tuple[Any, ...] = (bool, int, float, str, bytes, list, dict)
    for base in bases:
        if isinstance(value, base):  # a subclass (an IntEnum, a StrEnum): its base type
            return base(value)
    raise TypeError(f"{type(value).__name__} ({value!r:.60})")


def _restore(code: int, data: bytes) -> Any:
    if code == _TUPLE:
        return tuple(decode(data))
    if code == _ARRAY:
        dtype, shape, buffer = decode(data)
        return np.frombuffer(buffer, dtype=np.dtype(dtype)).reshape(shape)  # read-only: its bytes
    if code == _OBJECTS:
        shape, items = decode(data)
        out = np.empty(len(items), dtype=object)
        for index, item in enumerate(items):  # one by one: numpy would unpack a tuple item
            out[index] = item
        return out.reshape(shape)
    raise ValueError(f"unknown state value extension {code}")
