"""Data sets written to hurt ``streamflow score``, shared by its unit and CLI tests."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MIB = 1 << 20


def _good(i: int) -> dict[str, Any]:
    return {"id": f"r{i}", "seq": i, "value": float(i)}


def hostile_lines() -> bytes:
    """Good rows 0, 3 and 6 around a deep line, a long number and bytes not UTF-8; row 7
    parses, to a string that the input topic's encoder cannot take."""
    good = [json.dumps(_good(i)).encode() for i in range(7)]
    lines = [
        good[0],
        b"[" * 100_000 + b"]" * 100_000,
        b'{"id": "big", "seq": ' + b"9" * 5000 + b', "value": 1}',
        good[3],
        b'{"id": "\xff\xfe", "seq": 4, "value": 4}',
        b'{"id": "x", "seq": 5, "value": ' + b"[" * 100 + b"]" * 100 + b"}",
        good[6],
        b'{"id": "\\ud800", "seq": 7, "value": 7}',  # valid JSON, but no UTF-8 holds it
    ]
    return b"".join(line + b"\n" for line in lines)


_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("seq", pa.int64()),
        ("value", pa.float64()),
        ("blob", pa.list_(pa.dictionary(pa.int32(), pa.string()))),  # read as list<string>
        ("bits", pa.list_(pa.int8())),
    ]
)


def write_groups(path: Path, groups: list[dict[str, Any]]) -> None:
    """One row group per dict of columns. The Arrow schema is not stored, so ``blob`` is
    read back as plain strings: every copy of a dictionary entry is made when read."""
    with pq.ParquetWriter(path, _SCHEMA, compression="zstd", store_schema=False) as writer:
        for group in groups:
            writer.write_table(pa.table(group, schema=_SCHEMA))


def rows(numbers: list[int], **columns: Any) -> dict[str, Any]:
    empty = {"blob": pa.array([None] * len(numbers), _SCHEMA.field("blob").type)}
    empty["bits"] = pa.array([None] * len(numbers), _SCHEMA.field("bits").type)
    return {
        "id": [f"r{i}" for i in numbers],
        "seq": numbers,
        "value": [float(i) for i in numbers],
        **empty,
        **columns,
    }


def copies(text: str, count: int) -> Any:
    """One row: a list of ``count`` copies of ``text``, one dictionary entry in the file."""
    indices = pa.array(np.zeros(count, dtype=np.int32))
    entries = pa.DictionaryArray.from_arrays(indices, pa.array([text]))
    return pa.ListArray.from_arrays(pa.array([0, count], pa.int32()), entries)


def zeros(count: int) -> Any:
    """One row: a list of ``count`` zero bytes, a run of a few bytes in the file."""
    return pa.ListArray.from_arrays(pa.array([0, count], pa.int32()), np.zeros(count, np.int8))


def hostile_parquet(path: Path, *, values: int, count: int) -> None:
    """Rows 0-2 good; row 3 holds ``values`` values (its footer says so); row 4 holds
    ``count`` copies of a 1 MiB string (its footer says 1 MiB); row 5 good."""
    write_groups(
        path,
        [
            rows([0, 1, 2]),
            rows([3], bits=zeros(values)),
            rows([4], blob=copies("x" * MIB, count)),
            rows([5]),
        ],
    )


def lying_footer(path: Path, values: int) -> None:
    """Make the footer say 1 value where the pages hold ``values``: the footer is only the
    writer's word (the same varint width, so nothing else moves)."""
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    zigzag, varint = 2 * values, bytearray()
    while True:
        varint.append((zigzag & 0x7F) | (0x80 if zigzag >> 7 else 0))
        zigzag >>= 7
        if not zigzag:
            break
    at = data.find(bytes(varint), footer)
    assert at > 0
    data[at : at + len(varint)] = bytes([0x82] + [0x80] * (len(varint) - 2) + [0x00])
    path.write_bytes(bytes(data))
