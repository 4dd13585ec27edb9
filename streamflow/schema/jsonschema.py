"""A JSON Schema (draft-07) for the JSON that a port's Avro schema allows.

Ports are typed by Avro schemas; a ``json-registry`` topic must still offer
its consumers a JSON Schema in the registry, so that clients written with
other tools (confluent-kafka's ``JSONDeserializer``, the Java serdes) can
validate what streamflow writes. The schema describes the JSON our codecs
produce: bytes and fixed as base64 strings, timestamps and dates as ISO-8601
strings (or the epoch numbers a streamlet may give instead), decimals and
UUIDs as strings, a union as ``anyOf`` its branches.

Every named type becomes a definition referenced by ``$ref``, so recursive
types terminate and a type used twice is written once. A record field is
required unless it has a default, and records allow no other properties,
as an Avro reader would not keep them.
"""

from __future__ import annotations

import copy
from typing import Any

from streamflow.schema.store import Schema

__all__ = ["from_avro"]

_DRAFT = "http://json-schema.org/draft-07/schema#"
_PRIMITIVES: dict[str, dict[str, Any]] = {
    "null": {"type": "null"},
    "boolean": {"type": "boolean"},
    "int": {"type": "integer"},
    "long": {"type": "integer"},
    "float": {"type": "number"},
    "double": {"type": "number"},
    "string": {"type": "string"},
    "bytes": {"type": "string", "contentEncoding": "base64"},
}
# A time-based value may also be its Avro number (epoch millis, days...): the
# codecs accept and write it as given, so the schema must not refuse it.
_STRING_OR_NUMBER = ["string", "integer"]
_LOGICAL: dict[str, dict[str, Any]] = {
    "timestamp-millis": {"type": _STRING_OR_NUMBER, "format": "date-time"},
    "timestamp-micros": {"type": _STRING_OR_NUMBER, "format": "date-time"},
    "local-timestamp-millis": {"type": _STRING_OR_NUMBER},
    "local-timestamp-micros": {"type": _STRING_OR_NUMBER},
    "date": {"type": _STRING_OR_NUMBER, "format": "date"},
    "time-millis": {"type": _STRING_OR_NUMBER, "format": "time"},
    "time-micros": {"type": _STRING_OR_NUMBER, "format": "time"},
    "decimal": {"type": "string"},
    "uuid": {"type": "string", "format": "uuid"},
}


def from_avro(schema: Schema) -> dict[str, Any]:
    """The JSON Schema document for records of ``schema``."""
    definitions: dict[str, Any] = {}
    top = _Translator(definitions).node(schema.parsed)
    return {"$schema": _DRAFT, "title": schema.name, **top, "definitions": definitions}


class _Translator:
    def __init__(self, definitions: dict[str, Any]) -> None:
        self.definitions = definitions

    def node(self, avro: Any) -> dict[str, Any]:
        if isinstance(avro, str):
            return self.named_or_primitive(avro)
        if isinstance(avro, list):
            return {"anyOf": [self.node(branch) for branch in avro]}
        logical = avro.get("logicalType")
        if logical in _LOGICAL:
            return copy.deepcopy(_LOGICAL[logical])
        kind = avro.get("type")
        if kind in ("record", "enum", "fixed"):
            return self.named(avro)
        if kind == "array":
            return {"type": "array", "items": self.node(avro["items"])}
        if kind == "map":
            return {"type": "object", "additionalProperties": self.node(avro["values"])}
        return self.node(kind)

    def named_or_primitive(self, name: str) -> dict[str, Any]:
        if name in _PRIMITIVES:
            return dict(_PRIMITIVES[name])
        return {"$ref": f"#/definitions/{name}"}  # defined where it first appeared

    def named(self, avro: dict[str, Any]) -> dict[str, Any]:
        name = avro["name"]
        ref = {"$ref": f"#/definitions/{name}"}
        if name in self.definitions:
            return ref
        self.definitions[name] = {}  # a placeholder first, so recursion stops here
        kind = avro["type"]
        if kind == "enum":
            body: dict[str, Any] = {"type": "string", "enum": list(avro["symbols"])}
        elif kind == "fixed":
            body = {"type": "string", "contentEncoding": "base64"}
        else:
            fields = avro.get("fields", [])
            body = {
                "type": "object",
                "properties": {f["name"]: self.node(f["type"]) for f in fields},
                "required": [f["name"] for f in fields if "default" not in f],
                "additionalProperties": False,
            }
        if avro.get("doc"):
            body["description"] = avro["doc"]
        self.definitions[name] = body
        return ref
