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
from streamflow.streamlets.serving.artifacts import pack_directory

__all__ = ["ModelPublisher"]


class ModelPublisher(Streamlet):
    """Publishes one ModelDescriptor at start: a Keras file, a SavedModel, or a server URL."""

    out = Outlet("out", "streamflow.ml.ModelDescriptor", key=lambda r: r["name"])

    name = params.Str(description="the model's name (the key on the control topic)")
    version = params.Int(default=1, min=1, description="the version to publish")
    keras = params.Str(default="", description="a .keras file (relative to the blueprint)")
    saved_model = params.Str(default="", description="a SavedModel directory")
    url = params.Str(default="", description="a model server's base URL")
    protocol = params.Choice(("v1", "v2"), default="v2", description="the server's protocol")
    by_reference = params.Bool(
        default=False, description="send a file:// location instead of the bytes"
    )

    def source(self) -> Iterator[dict[str, Any]]:
        yield self.descriptor()

    def descriptor(self) -> dict[str, Any]:
        chosen = [v for v in (self.keras, self.saved_model, self.url) if v]
        if len(chosen) != 1:
            raise ValueError("set exactly one of keras, saved_model or url")
        data: bytes | None = None
        location: str | None = None
        if self.url:
            kind = "TF_SERVING" if self.protocol == "v1" else "OPEN_INFERENCE_V2"
            location = self.url
        else:
            path = Path(self.keras or self.saved_model)
            kind = "KERAS" if self.keras else "TF_SAVED_MODEL"
            data = path.read_bytes() if self.keras else pack_directory(path)
            if self.by_reference:
                location = path.resolve().as_uri()
        return {
            "name": self.name,
            "version": self.version,
            "kind": kind,
            "data": None if self.by_reference else data,
            "location": location,
            "sha256": hashlib.sha256(data).hexdigest() if data is not None else None,
            "parameters": {},
            "description": f"published by {self.context.app}.{self.context.streamlet}",
            "created_at": dt.datetime.now(dt.UTC),
        }
