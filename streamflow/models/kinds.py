"""The words of the built-in model schemas, once: the kinds of model and the states of one.

``streamflow.ml.ModelDescriptor.kind`` and ``streamflow.ml.ModelStatus.state`` are
Avro enums; their symbols are the members here, as ``str`` enums, so a value read
from a record compares equal to its member and a member writes as its symbol.
The publisher, the CLI, the serving follower and the drift and explanation
streamlets use these names instead of spelling the strings again.
"""

from __future__ import annotations

import enum
from types import MappingProxyType

__all__ = [
    "ARTIFACT_OPTIONS",
    "EMBEDDED_KINDS",
    "FINAL_STATES",
    "PROTOCOLS",
    "REMOTE_KINDS",
    "TROUBLE_STATES",
    "ModelKind",
    "ModelState",
]


class ModelKind(enum.StrEnum):
    """What a model descriptor points at (``ModelDescriptor.kind``)."""

    TF_SAVED_MODEL = "TF_SAVED_MODEL"
    KERAS = "KERAS"
    TF_SERVING = "TF_SERVING"  # a KServe V1 (TF Serving style) model server
    OPEN_INFERENCE_V2 = "OPEN_INFERENCE_V2"  # an Open Inference Protocol V2 model server
    ONNX = "ONNX"


class ModelState(enum.StrEnum):
    """Where a replica stands with a model version (``ModelStatus.state``)."""

    LOADING = "loading"
    SERVING = "serving"
    FAILED = "failed"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    RETIRED = "retired"  # a rollout's candidate, unloaded: rolled back, promoted or replaced


# the kinds a replica runs itself, and those it calls a server for
EMBEDDED_KINDS = frozenset({ModelKind.KERAS, ModelKind.TF_SAVED_MODEL, ModelKind.ONNX})
REMOTE_KINDS = frozenset({ModelKind.TF_SERVING, ModelKind.OPEN_INFERENCE_V2})
# the artifact options of `model push` and the publisher (--keras, ...), and their kinds
ARTIFACT_OPTIONS = MappingProxyType(
    {"keras": ModelKind.KERAS, "saved_model": ModelKind.TF_SAVED_MODEL, "onnx": ModelKind.ONNX}
)
# the protocols a model server is named by (--protocol v1|v2), and their kinds
PROTOCOLS = MappingProxyType({"v1": ModelKind.TF_SERVING, "v2": ModelKind.OPEN_INFERENCE_V2})
# the states a replica stays in until the next version, and those worth a warning
FINAL_STATES = frozenset(
    {
        ModelState.SERVING,
        ModelState.FAILED,
        ModelState.REJECTED,
        ModelState.SUPERSEDED,
        ModelState.RETIRED,
    }
)
TROUBLE_STATES = frozenset({ModelState.FAILED, ModelState.REJECTED, ModelState.SUPERSEDED})
