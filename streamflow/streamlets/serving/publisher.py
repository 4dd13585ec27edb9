"""An ingress that publishes a model descriptor when the application starts.

It lets a blueprint carry its initial model: wire its ``out`` to the serving
streamlet's control topic, and the first model is pushed as the application
comes up, exactly as ``streamflow model push`` would push it. Publishing the
same version again (after a restart) is harmless: serving rejects versions
that are not newer than what it serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamflow.api import params
from streamflow.api.ports import Outlet
from streamflow.api.streamlet import Streamlet
from streamflow.models.descriptor import build_descriptor

__all__ = ["ModelPublisher"]


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
        built = build_descriptor(
            self.name,
            self.version,
            artifact=None if form == "url" else (form, Path(value)),
            url=value if form == "url" else None,
            protocol=self.protocol,
            parameters={k: str(v) for k, v in self.parameters.items()},
            by_reference=self.by_reference,
            description=f"published by {self.context.app}.{self.context.streamlet}",
        )
        return built.to_record()
