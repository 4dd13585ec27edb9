"""Avro bytes the schema tests build by hand."""

from __future__ import annotations

import io
from typing import Any

import fastavro

from streamflow.schema import Schema


def bare(schema: Schema, record: dict[str, Any]) -> bytes:
    """``record``'s Avro body in ``schema``, with no header (the bare wire format)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema.parsed, record)
    return buf.getvalue()


def varint(n: int) -> bytes:
    """Avro's zig-zag varint (a long, a length, a block count)."""
    n = (n << 1) ^ (n >> 63) if n >= 0 else ((-n) << 1) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)
