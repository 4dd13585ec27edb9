"""An ingress that publishes a model descriptor when the application starts.

It lets a blueprint carry its initial model: wire its ``out`` to the serving
streamlet's control topic, and the first model is pushed as the application
comes up, exactly as ``streamflow model push`` would push it. Publishing the
same version again (after a restart) is harmless: serving rejects versions
that are not newer than what it serves.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamflow.api import params
from streamflow.api.ports import Outlet
from streamflow.api.streamlet import Streamlet
from streamflow.schema.models import ARTIFACT_OPTIONS, PROTOCOLS
from streamflow.streamlets.serving.artifacts import pack_directory

__all__ = ["ModelPublisher", "build_descriptor"]


def build_descriptor(
    name: str,
    version: int,
    *,
    artifact: tuple[str, Path] | None = None,
    url: str | None = None,
    protocol: str = "v2",
    parameters: dict[str, str] | None = None,
    by_reference: bool = False,
    description: str = "",
) -> dict[str, Any]:
    """A ModelDescriptor for an artifact (``("keras"|"saved_model"|"onnx", path)``) or a URL.

    ``model push`` and ``ModelPublisher`` both build theirs here, so a blueprint's
    first model and a pushed one are the same record.
    """
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
    return {
        "name": name,
        "version": version,
        "kind": kind,
        "data": None if by_reference else data,
        "location": location,
        "sha256": digest,
        "parameters": dict(parameters or {}),
        "description": description,
        "created_at": dt.datetime.now(dt.UTC),
    }


class ModelPublisher(Streamlet):
    """Publishes one ModelDescriptor at start: a Keras, SavedModel or ONNX file, or a server URL."""

    out = Outlet("out", "streamflow.ml.ModelDescriptor", key=lambda r: r["name"])

    name = params.Str(description="the model's name (the key on the control topic)")
    version = params.Int(default=1, min=1, description="the version to publish")
    keras = params.Str(default="", description="a .keras file (relative to the blueprint)")
    saved_model = params.Str(default="", description="a SavedModel directory")
    onnx = params.Str(default="", description="an .onnx file")
    url = params.Str(default="", description="a model server's base URL")
    protocol = params.Choice(("v1", "v2"), default="v2", description="the server's protocol")
    parameters = params.Mapping(default={}, description="descriptor parameters (strings)")
    by_reference = params.Bool(
        default=False, description="send a file:// location instead of the bytes"
    )

    def source(self) -> Iterator[dict[str, Any]]:
        yield self.descriptor()

    def descriptor(self) -> dict[str, Any]:
        given = {
            form: value
            for form, value in (
                ("keras", self.keras),
                ("saved_model", self.saved_model),
                ("onnx", self.onnx),
                ("url", self.url),
            )
            if value
        }
        if len(given) != 1:
            raise ValueError("set exactly one of keras, saved_model, onnx or url")
        ((form, value),) = given.items()
        return build_descriptor(
            self.name,
            self.version,
            artifact=None if form == "url" else (form, Path(value)),
            url=value if form == "url" else None,
            protocol=self.protocol,
            parameters={k: str(v) for k, v in self.parameters.items()},
            by_reference=self.by_reference,
            description=f"published by {self.context.app}.{self.context.streamlet}",
        )
