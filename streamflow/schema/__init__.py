"""Avro schemas: loading from search paths, codecs, and compatibility.

This layer is pure data: nothing here talks to Kafka. Everything above it
refers to a schema by its full name and asks a :class:`SchemaStore` for it.
"""

from streamflow.schema.codecs import (
    Codec,
    DecodeError,
    EncodeError,
    JsonCodec,
    SingleObjectCodec,
)
from streamflow.schema.compat import compatibility_problems
from streamflow.schema.fingerprint import fingerprint64
from streamflow.schema.store import Schema, SchemaError, SchemaStore, builtin_schema_dir

__all__ = [
    "Codec",
    "DecodeError",
    "EncodeError",
    "JsonCodec",
    "Schema",
    "SchemaError",
    "SchemaStore",
    "SingleObjectCodec",
    "builtin_schema_dir",
    "compatibility_problems",
    "fingerprint64",
]
