"""What a state value's bytes may hold, judged before msgpack builds anything from them.

A value comes back from the changelog, which anyone who can write the topic can
write. msgpack decodes an extension by calling back into Python, which decodes
its body with a fresh unpacker on the C stack: 200 tuples nested in 714 bytes
overflowed it and killed the replica, at every restart, whenever its logic read
the key. So :func:`check` walks the bytes first, with a list for a stack (a
hostile value cannot make it recurse), and refuses a value that nests deeper
than :data:`MAX_DEPTH`, holds more than :data:`MAX_ITEMS` values, is longer than
:data:`MAX_VALUE_BYTES`, makes msgpack copy more than :data:`MAX_COPIED_BYTES`
(each extension's body is copied once per level it sits under), or is anything
but one whole value of the kinds :mod:`.codec` writes. The store writes only
what passes (:func:`.codec.encode` runs the same check), so what the logic set
can always be read back.

The walk costs a step per value; strings, bytes and numpy arrays (one bytes
value each) are stepped over whole.
"""

from __future__ import annotations

__all__ = ["MAX_COPIED_BYTES", "MAX_DEPTH", "MAX_ITEMS", "MAX_VALUE_BYTES", "check"]

#: Lists, dicts and tuples nested in each other, at most (a numpy array takes two).
MAX_DEPTH = 32
#: Values in one state value, all told: every key, item and number counts.
MAX_ITEMS = 1_000_000
#: The bytes of one state value (Kafka's own default limit on a record is 1 MB).
MAX_VALUE_BYTES = 16 * 1024 * 1024
#: What decoding copies: each extension's body, once for each extension it is in.
MAX_COPIED_BYTES = 64 * 1024 * 1024
#: The extension types :mod:`.codec` writes: a tuple, a numeric array, an object array.
EXTENSIONS = frozenset({1, 2, 3})

# What follows the first byte of a value (msgpack's spec), by that byte: for a
# scalar, how many bytes (>= 0); -1 for a str or bin (a length, then its bytes),
# -2 for a list, a map or an extension (walked below), -3 for no value at all.
_STEP = [0] * 0x80 + [-2] * 0x20 + list(range(0x20)) + [-3] * 0x20 + [0] * 0x20
_STEP[0xC0:0xE0] = [
    *(0, -3, 0, 0, -1, -1, -1, -2, -2, -2, 4, 8, 1, 2, 4, 8),  # nil .. uint 64
    *(1, 2, 4, 8, -2, -2, -2, -2, -2, -1, -1, -1, -2, -2, -2, -2),  # int 8 .. map 32
]
_LENGTH = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # a str or bin's
_COUNTED = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}  # width, values per entry
_EXT_SIZED = {0xC7: 1, 0xC8: 2, 0xC9: 4}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_ARRAY_LEADS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def check(data: bytes) -> None:
    """Return if ``data`` is one value within the bounds; ValueError, saying why, if not."""
    size = len(data)
    if size > MAX_VALUE_BYTES:
        raise ValueError(f"it takes {size:,} bytes, more than {MAX_VALUE_BYTES:,}")
    try:
        _walk(data, size)
    except IndexError:  # a length or a count that runs past the end
        raise ValueError("it is cut short") from None


def _walk(data: bytes, size: int) -> None:
    # what is open: [values still to come in it, the offset it must end at (-1: a list
    # or map, which ends where its last value does)]; the whole value is the first
    frames: list[list[int]] = [[1, size]]
    pos = depth = items = copied = 0
    while frames:
        frame = frames[-1]
        # the scalars that come next, in a tight loop: most of a value is scalars
        remaining = frame[0]
        while remaining:
            lead = data[pos]
            step = _STEP[lead]
            if step >= 0:
                pos += 1 + step
            elif step == -1:
                width = _LENGTH[lead]
                pos += 1 + width + int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
            else:
                break
            remaining -= 1
        items += frame[0] - remaining
        frame[0] = remaining
        if pos > size:
            raise IndexError
        if items > MAX_ITEMS:
            raise ValueError(f"it holds more than {MAX_ITEMS:,} items")
        if remaining == 0:
            frames.pop()
            if frame[1] < 0:
                depth -= 1
            elif pos != frame[1] and frames:
                raise ValueError("an extension whose body is not one value")
            elif pos != frame[1]:
                raise ValueError("bytes after the value")
            continue
        # a list, a map or an extension opens here (or a byte no value starts with)
        frame[0] -= 1
        items += 1
        lead = data[pos]
        pos += 1
        if lead < 0xA0:  # fixmap, fixarray
            count = (lead & 0x0F) * (2 if lead < 0x90 else 1)
        elif lead in _COUNTED:
            width, per_entry = _COUNTED[lead]
            count = per_entry * int.from_bytes(data[pos : pos + width], "big")
            pos += width
        elif lead in _FIXEXT or lead in _EXT_SIZED:
            if lead in _FIXEXT:
                length = _FIXEXT[lead]
            else:
                width = _EXT_SIZED[lead]
                length = int.from_bytes(data[pos : pos + width], "big")
                pos += width
            code = int.from_bytes(data[pos : pos + 1], "big", signed=True)
            pos += 1
            if code not in EXTENSIONS:
                raise ValueError(f"an unknown extension ({code})")
            if length < 1 or data[pos] not in _ARRAY_LEADS:
                raise ValueError("an extension that holds no list")
            copied += length
            if copied > MAX_COPIED_BYTES:
                raise ValueError(f"its extensions copy more than {MAX_COPIED_BYTES:,} bytes")
            frames.append([1, pos + length])  # its body: one list, then its end
            continue
        else:
            raise ValueError(f"a byte no msgpack value starts with (0x{lead:02x})")
        if count > size - pos:  # every value takes a byte at least
            raise IndexError
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"it nests deeper than {MAX_DEPTH} levels")
        frames.append([count, -1])
