"""A model descriptor, typed: what a ``streamflow.ml.ModelDescriptor`` record says.

The control topic carries descriptors as Avro records, which the runtime hands
over as dicts. Everything past the first read uses this form instead: its kind
is a :class:`ModelKind`, its optional fields are ``None`` rather than missing,
and the questions asked of it in several places (is it a model server? is the
artifact inline? what to call it in a status line) are answered here once.
:func:`build_descriptor` is where ``model push`` and ``ModelPublisher`` both
make theirs, so a blueprint's first model and a pushed one are the same record.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from streamflow.models.artifacts import pack_directory
from streamflow.models.kinds import ARTIFACT_OPTIONS, PROTOCOLS, REMOTE_KINDS, ModelKind
from streamflow.models.rollout import Rollout

__all__ = ["ModelDescriptor", "build_descriptor"]

_EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)


@dataclasses.dataclass(frozen=True)
class ModelDescriptor:
    """One version of a model: an artifact (inline or at a location) or a model server."""

    name: str
    version: int
    kind: ModelKind
    data: bytes | None = None
    location: str | None = None
    sha256: str | None = None
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    description: str = ""
    created_at: dt.datetime = _EPOCH
    rollout: Rollout | None = None  # set: a candidate beside the stable version

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))

    @classmethod
    def from_record(cls, value: Mapping[str, Any]) -> ModelDescriptor:
        """From a decoded record; an unknown kind raises ValueError (the schema's enum
        keeps it out of a record read from the topic, so only a hand-made one has it)."""
        rollout = value.get("rollout")
        created = value.get("created_at")
        if isinstance(created, int):  # timestamp-millis not decoded as a datetime
            created = dt.datetime.fromtimestamp(created / 1000, dt.UTC)
        return cls(
            name=value["name"],
            version=int(value["version"]),
            kind=ModelKind(value["kind"]),
            data=value.get("data"),
            location=value.get("location"),
            sha256=value.get("sha256"),
            parameters=value.get("parameters") or {},
            description=value.get("description") or "",
            created_at=created or _EPOCH,
            rollout=Rollout.from_record(rollout) if rollout else None,
        )

    def to_record(self) -> dict[str, Any]:
        """The record to write to a control topic."""
        fields = (f.name for f in dataclasses.fields(self))
        record = {name: getattr(self, name) for name in fields}
        record["parameters"] = dict(self.parameters)
        record["rollout"] = self.rollout.to_record() if self.rollout is not None else None
        return record

    @property
    def tag(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def artifact(self) -> tuple[str, str | None, str | None, tuple[tuple[str, str], ...]]:
        """What it loads (kind, digest, location, parameters): two descriptors of one
        version with the same artifact load the same model."""
        digest = self.sha256
        if digest is None and self.data is not None:
            digest = hashlib.sha256(self.data).hexdigest()
        return (self.kind.value, digest, self.location, tuple(sorted(self.parameters.items())))

    @property
    def remote(self) -> bool:
        """Served by a model server at ``location``, rather than run in the replica."""
        return self.kind in REMOTE_KINDS

    @property
    def inline(self) -> bool:
        """The artifact travels in the record itself."""
        return self.data is not None

    def summary(self) -> str:
        """What a status line says while it loads: its description, or its kind and where."""
        where = "inline" if self.inline else self.location
        return self.description or f"{self.kind} ({where})"


def build_descriptor(
    name: str,
    version: int,
    *,
    artifact: tuple[str, Path] | None = None,
    url: str | None = None,
    protocol: str = "v2",
    parameters: Mapping[str, str] | None = None,
    by_reference: bool = False,
    description: str = "",
) -> ModelDescriptor:
    """The descriptor of an artifact (``("keras"|"saved_model"|"onnx", path)``) or a URL."""
    data: bytes | None = None
    location: str | None = None
    if artifact is None:
        if not url:
            raise ValueError("give an artifact or a model server's URL")
        kind, location = PROTOCOLS[protocol], url
    else:
        form, path = artifact
        kind = ARTIFACT_OPTIONS[form]
        # a SavedModel directory by reference is read on the replica as a bare tar, which
        # (unlike gzip's bytes) is the same everywhere: that is the digest it must match
        packed = form == "saved_model"
        data = pack_directory(path, compress=not by_reference) if packed else path.read_bytes()
        if by_reference:
            location = path.resolve().as_uri()
    # a location is only accepted with its digest, so every descriptor carries one
    digest = hashlib.sha256(data).hexdigest() if data is not None else None
    return ModelDescriptor(
        name=name,
        version=version,
        kind=kind,
        data=None if by_reference else data,
        location=location,
        sha256=digest,
        parameters=parameters or {},
        description=description,
        created_at=dt.datetime.now(dt.UTC),
    )
