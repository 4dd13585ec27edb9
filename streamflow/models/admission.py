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

from collections.abc import Sequence

from streamflow.models import artifacts, onnx_model
from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.embedded import SAVED_MODEL_OFF
from streamflow.models.kinds import ModelKind

__all__ = ["refusal"]


def refusal(
    descriptor: ModelDescriptor, *, allowlist: Sequence[str], allow_saved_model: bool
) -> str | None:
    """Why ``descriptor`` is refused, in the publisher's terms, or None."""
    kind, location = descriptor.kind, descriptor.location
    if descriptor.remote and descriptor.inline:
        # the bytes would be ignored and the URL followed: refuse the ambiguity
        return "a remote model's descriptor carries no inline data"
    if kind == ModelKind.TF_SAVED_MODEL and not allow_saved_model:
        return SAVED_MODEL_OFF
    if kind == ModelKind.ONNX and (problem := onnx_model.threads_problem(descriptor.parameters)):
        return problem
    if not descriptor.remote:  # a model server's URL has no digest; an artifact does
        problem = artifacts.check_sha256(
            descriptor.sha256, location=None if descriptor.inline else location
        )
        if problem:
            return problem
    if location and not artifacts.allowed(location, allowlist):
        return f"location {location!r} is not in the allowlist ({', '.join(allowlist) or 'empty'})"
    return None
