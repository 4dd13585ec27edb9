"""Reader/writer compatibility under the Avro schema-resolution rules.

The verifier asks, for every topic, whether each consumer's schema can read
what each producer writes. The Apache Avro reference implementation ships a
checker for exactly these rules; we use it rather than re-derive them.
"""

from __future__ import annotations

import json

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from streamflow.schema.store import Schema

__all__ = ["compatibility_problems"]


def compatibility_problems(*, reader: Schema, writer: Schema) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer``; empty if it can."""
    if reader.fingerprint == writer.fingerprint:
        return []
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        _to_avro(reader), _to_avro(writer)
    )
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    messages = list(result.messages) or [f"{reader.name} cannot read {writer.name}"]
    return [f"{m} at {loc}" if loc else m for m, loc in zip(messages, result.locations, strict=False)]


def _to_avro(schema: Schema) -> avro.schema.Schema:
    return avro.schema.parse(json.dumps(schema.raw))
