"""One line (or cell) of a data file as JSON, with every way it can fail its row's problem.

A data file is read a row at a time, and whoever wrote it chose its bytes, so
Python's own limits must be a row's problem like any other, never the end of the
read (``streamflow score``, the generator and the file ingress read with this):

* bytes that are not UTF-8 are read as lone surrogates (files are opened with
  ``errors="surrogateescape"``), and the line is refused naming the first one;
* nesting past the recursion limit (``[[[[...``) raises ``RecursionError``, and
  nesting within it reaches code that recurses again (the converter, the
  dead-letters file), so a document is refused past :data:`MAX_DEPTH` levels;
* an integer of more than ``sys.get_int_max_str_digits()`` digits raises
  ``ValueError``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["MAX_DEPTH", "bad_byte", "not_utf8", "parse"]

#: Arrays and objects nested in each other, at most, in one row.
MAX_DEPTH = 64


def parse(text: str) -> Any:
    """The JSON value of ``text``; ValueError with a one-line reason when there is none."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ValueError(f"not valid JSON: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # the int-str conversion limit, and nothing else json raises
        digits = sys.get_int_max_str_digits()
        raise ValueError(f"not valid JSON: a number of more than {digits:,} digits") from None
    if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise ValueError(f"not valid JSON: nested deeper than {MAX_DEPTH} levels")
    return value


def not_utf8(text: str) -> str:
    """Why a line (read with ``errors="surrogateescape"``) is not UTF-8, or ''."""
    found = bad_byte(text)
    return f"not UTF-8: byte 0x{found[0]:02x} at column {found[1] + 1}" if found else ""


def bad_byte(text: str) -> tuple[int, int] | None:
    """The first byte of ``text`` that was not UTF-8, and its index, or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return ord(text[exc.start]) - 0xDC00, exc.start  # surrogateescape's stand-in
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects past ``limit``, walked without recursion."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
