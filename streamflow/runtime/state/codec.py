"""The bytes of a state value, in the local store and in the changelog.

msgpack carries what JSON would, plus bytes, and extension types carry what
the drift and explain streamlets keep: numpy arrays (numbers as their raw
buffer, strings and other objects as a nested list) and tuples, so a value
reads back as the type it was written. Nothing here can build an arbitrary
object, so a changelog written by someone else can at worst be refused: its
bytes are judged by :mod:`.bounds` before msgpack builds anything, and an
array's type and shape before numpy sees them.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    import numpy as np

from streamflow.runtime.state import bounds

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "MAX_VALUE_BYTES", "decode", "encode", "is_array"]

MAX_DEPTH, MAX_ITEMS, MAX_VALUE_BYTES = bounds.MAX_DEPTH, bounds.MAX_ITEMS, bounds.MAX_VALUE_BYTES

_TUPLE, _ARRAY, _OBJECTS = 1, 2, 3
_NUMERIC = re.compile(r"[<>|][biufc][0-9]{1,2}")  # a numeric dtype's ``str``: '<f8', '|b1'
_MAX_DIMENSIONS = 32


def encode(value: Any) -> bytes:
    """The value's bytes; TypeError, naming what is not storable, when it is not."""
    try:
        data = _pack(value)
        bounds.check(data)  # what could not be read back is refused where it is set
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"not a storable state value: {exc}") from None
    return data


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_extension, use_bin_type=True, strict_types=True)  # type: ignore[no-any-return]


def decode(data: bytes) -> Any:
    """The value; ValueError, saying what is wrong, for bytes the store would not write."""
    bounds.check(data)
    return _unpack(data)


def _unpack(data: bytes) -> Any:
    """A checked value, or an extension's body within one (checked with it)."""
    return msgpack.unpackb(data, ext_hook=_restore, raw=False, strict_map_key=False)


def _extension(value: Any) -> Any:
    """What msgpack cannot pack as it is (``strict_types``: subclasses come here too)."""
    if isinstance(value, tuple):
        return msgpack.ExtType(_TUPLE, _pack(list(value)))
    if is_array(value):
        if value.dtype.kind in "biufc":
            contiguous = sys.modules["numpy"].ascontiguousarray(value)
            body = [value.dtype.str, list(value.shape), contiguous.tobytes()]
            return msgpack.ExtType(_ARRAY, _pack(body))
        if value.dtype.kind in "OU":
            return msgpack.ExtType(_OBJECTS, _pack([list(value.shape), value.ravel().tolist()]))
    if isinstance(value, _numpy_type("generic")):
        return value.item()  # a numpy scalar: the Python number, string or bool it holds
    bases: tuple[Any, ...] = (bool, int, float, str, bytes, list, dict)
    for base in bases:
        if isinstance(value, base):  # a subclass (an IntEnum, a StrEnum): its base type
            return base(value)
    raise TypeError(f"{type(value).__name__} ({value!r:.60})")


def is_array(value: Any) -> bool:
    """Whether ``value`` is a numpy array, without importing numpy: until something has
    imported it, no value is one (a replica that keeps none never pays for the import)."""
    return isinstance(value, _numpy_type("ndarray"))


def _numpy_type(name: str) -> Any:
    """numpy's ``name`` once numpy is imported (wholly: another thread may be importing it);
    else a type no value is."""
    return getattr(sys.modules.get("numpy"), name, _NoValue)


class _NoValue:
    """A type no value is (numpy is not imported)."""


def _restore(code: int, data: bytes) -> Any:
    body = _unpack(data)  # a list: bounds.check saw to it
    if code == _TUPLE:
        return tuple(body)
    if code == _ARRAY:
        return _array(body)
    if code == _OBJECTS:
        return _objects(body)
    raise ValueError(f"an unknown extension ({code})")


def _array(body: list[Any]) -> np.ndarray:
    if len(body) != 3 or not isinstance(body[0], str) or not isinstance(body[2], bytes):
        raise ValueError("an array not as the store writes one")
    kind, shape, buffer = body
    if not _NUMERIC.fullmatch(kind):
        raise ValueError(f"an array of type {kind[:20]!r}")
    import numpy as np

    dtype = np.dtype(kind)
    if _size(shape) * dtype.itemsize != len(buffer):
        raise ValueError(f"an array whose shape {shape} does not fit its {len(buffer):,} bytes")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)  # read-only: its bytes


def _objects(body: list[Any]) -> np.ndarray:
    if len(body) != 2 or not isinstance(body[1], list):
        raise ValueError("an array not as the store writes one")
    shape, items = body
    if _size(shape) != len(items):
        raise ValueError(f"an array whose shape {shape} does not fit its {len(items):,} items")
    import numpy as np

    out = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):  # one by one: numpy would unpack a tuple item
        out[index] = item
    return out.reshape(shape)


def _size(shape: Any) -> int:
    """How many items ``shape`` holds: a list of counts, as numpy's ``shape`` is."""
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"an array whose shape {shape!r:.60} is not a list of sizes")
    if len(shape) > _MAX_DIMENSIONS:
        raise ValueError(f"an array of {len(shape)} dimensions")
    size = 1
    for n in shape:
        size *= n
    return size
