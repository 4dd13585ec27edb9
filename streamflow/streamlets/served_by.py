"""Which model version served a record: the headers the serving streamlet writes.

Every output of a serving streamlet carries ``streamflow-model`` (``name:version``); an
AB rollout's also ``streamflow-arm``, and a record its candidate was to serve but failed
(the stable version served it instead) ``streamflow-fallback`` with the candidate's tag.
The drift, explanation and rollout evidence streamlets read them back here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamflow.api.streamlet import Record

__all__ = ["ARM", "FALLBACK", "MODEL", "model_of", "tag_of"]

MODEL, ARM = "streamflow-model", "streamflow-arm"
FALLBACK = "streamflow-fallback"


def tag_of(raw: bytes | None) -> tuple[str, int] | None:
    """``(name, version)`` of a ``name:version`` header value; None if it is not one."""
    if not raw:
        return None
    name, _, version = raw.decode("utf-8", "replace").rpartition(":")
    return (name, int(version)) if version.isdigit() else None


def model_of(record: Record) -> tuple[str, int]:
    """The model that produced an output: its ``streamflow-model`` header, else its fields."""
    found = tag_of(record.headers.get(MODEL))
    if found is not None:
        return found
    value: Mapping[str, Any] = record.value
    version_field = value.get("model_version")
    return str(value.get("model") or ""), int(version_field) if version_field else 0
