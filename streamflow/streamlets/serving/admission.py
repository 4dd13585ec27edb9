"""Which descriptors a replica refuses before reading anything of them.

These are the checks that need nothing but the descriptor and the
streamlet's settings, so they run the moment a descriptor arrives and a
refusal is reported as ``rejected`` at once. Each is repeated where what it
guards is used (the allowlist where an artifact is read and where a model
server's client is built, the SavedModel opt-in where a model is loaded, an
ONNX model's ``threads`` where its session is made), so a mistake here does
not open the door.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from streamflow.schema.models import REMOTE_KINDS, ModelKind
from streamflow.streamlets.serving import artifacts, onnx_model
from streamflow.streamlets.serving.embedded import SAVED_MODEL_OFF

__all__ = ["refusal"]


def refusal(
    descriptor: Mapping[str, Any], *, allowlist: Sequence[str], allow_saved_model: bool
) -> str | None:
    """Why ``descriptor`` is refused, in the publisher's terms, or None."""
    kind, location = descriptor["kind"], descriptor.get("location")
    inline = descriptor.get("data") is not None
    if kind in REMOTE_KINDS and inline:
        # the bytes would be ignored and the URL followed: refuse the ambiguity
        return "a remote model's descriptor carries no inline data"
    if kind == ModelKind.TF_SAVED_MODEL and not allow_saved_model:
        return SAVED_MODEL_OFF
    if kind == ModelKind.ONNX and (
        problem := onnx_model.threads_problem(descriptor.get("parameters") or {})
    ):
        return problem
    if kind not in REMOTE_KINDS:  # a model server's URL has no digest; an artifact does
        problem = artifacts.check_sha256(
            descriptor.get("sha256"), location=None if inline else location
        )
        if problem:
            return problem
    if location and not artifacts.allowed(location, allowlist):
        return f"location {location!r} is not in the allowlist ({', '.join(allowlist) or 'empty'})"
    return None
