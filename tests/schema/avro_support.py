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
