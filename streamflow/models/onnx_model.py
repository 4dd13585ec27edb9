"""ONNX models, run with onnxruntime inside the replica.

An ONNX file is data, but two of its features reach outside it, and a model
from a control topic must not use either:

- **custom operators** live in shared libraries that a session would have to
  load (``register_custom_ops_library``); we never register one, and a graph
  whose nodes use an operator domain outside the standard ones is refused up
  front, with the domain named, instead of failing obscurely in the session;
- **external data**: a tensor may say its bytes are in another file, by a path
  that onnxruntime resolves, which would let a descriptor read files beside (or,
  with ``..``, outside) the cache. Models with external data are refused; push
  a self-contained model.

A classifier converted by skl2onnx returns its probabilities, by default, as
a sequence of {class: probability} maps (its ZipMap operator), not a tensor;
such an output is read into a [batch, classes] float32 tensor, the classes in
sorted order (scikit-learn's ``classes_`` order), so serving, drift and
explain see what ``zipmap=False`` would have given. An output of any other
non-tensor type is declared as such, and a mapping that uses it is refused
with the fix.

The session is made from the verified bytes (never from a path), with a small
thread pool (one thread unless the descriptor's ``threads`` says otherwise) so
replicas on one machine do not oversubscribe its cores. ``threads`` comes from
whoever writes the control topic and each of its threads is an OS thread of
the replica, so it is bounded: a whole number from 1 to :data:`MAX_THREADS`,
refused otherwise (2,000 once started 2,003 threads). The bound is fixed, not
the machine's core count, so a descriptor is valid on every replica alike.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from streamflow.models import artifacts
from streamflow.models.embedded_model import EmbeddedModel
from streamflow.models.tensor_specs import TENSOR, ZIPMAP
from streamflow.models.tensors import MappingError, ModelSignature, TensorSpec

__all__ = ["MAX_THREADS", "STANDARD_DOMAINS", "load", "threads", "threads_problem"]

#: Operator domains onnxruntime implements itself ("" is the default ai.onnx domain).
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})

#: The most intra-op threads a descriptor may give an ONNX model.
MAX_THREADS = 64

_DTYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
    "tensor(string)": "string",
}


def load(artifact: Path, *, parameters: Mapping[str, str]) -> EmbeddedModel:
    if any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxruntime")):
        raise artifacts.ArtifactError(
            "ONNX models need onnx and onnxruntime: install streamflow[onnx] in the replica"
        )
    import onnxruntime

    data = artifact.read_bytes()
    check(data)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads(parameters)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only
    try:
        session = onnxruntime.InferenceSession(
            data, sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own exception types
        raise artifacts.ArtifactError(f"not a loadable ONNX model: {exc}") from None
    signature = ModelSignature(
        inputs={i.name: _spec(i) for i in session.get_inputs()},
        outputs={o.name: _spec(o) for o in session.get_outputs()},
    )
    names = list(signature.outputs)
    dtypes = {name: spec.dtype for name, spec in signature.inputs.items()}
    zipmaps = {name for name, spec in signature.outputs.items() if spec.kind == ZIPMAP}

    def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
        feed = {name: _feed(array, dtypes.get(name, "")) for name, array in inputs.items()}
        out = dict(zip(names, session.run(names, feed), strict=True))
        for name in zipmaps:
            out[name] = _zipmap_rows(name, out[name])
        return out

    return EmbeddedModel(
        run,
        signature=signature,
        description=f"onnx:{len(signature.inputs)} in, {len(names)} out",
        differentiable=False,
    )


def threads_problem(parameters: Mapping[str, str]) -> str | None:
    """What is wrong with a descriptor's ``threads`` parameter, or None when it is fine."""
    value = parameters.get("threads", "1")
    whole = isinstance(value, str) and re.fullmatch(r"[0-9]{1,3}", value) is not None
    if whole and 1 <= int(value) <= MAX_THREADS:
        return None
    shown = str(value)
    shown = repr(shown if len(shown) <= 20 else shown[:20] + "...")
    return (
        f"parameter threads must be a whole number from 1 to {MAX_THREADS} "
        f"(onnxruntime's threads for this model), not {shown}"
    )


def threads(parameters: Mapping[str, str]) -> int:
    """The intra-op threads for a session; raises ArtifactError outside 1 to MAX_THREADS."""
    problem = threads_problem(parameters)
    if problem:
        raise artifacts.ArtifactError(problem)
    return int(parameters.get("threads", "1"))


def check(data: bytes) -> None:
    """Refuse models with custom operator domains or external data (raises ArtifactError)."""
    from onnx import ModelProto, TensorProto

    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError
        raise artifacts.ArtifactError(f"not an ONNX model: {exc}") from None
    if not model.graph.node and not model.graph.output:
        raise artifacts.ArtifactError("not an ONNX model: the graph is empty")
    domains = {op.domain for op in model.opset_import} | set(_node_domains(model.graph))
    for function in model.functions:
        domains |= {function.domain, *_node_domains(function)}
    custom = sorted(d for d in domains if d not in STANDARD_DOMAINS)
    if custom:
        raise artifacts.ArtifactError(
            f"the ONNX model uses custom operator domain(s) {', '.join(custom)}; custom-op "
            "libraries are not loaded from a control topic"
        )
    for tensor in _tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL or tensor.external_data:
            raise artifacts.ArtifactError(
                f"the ONNX model keeps tensor {tensor.name!r} in an external file; "
                "push a self-contained model (onnx.save with save_as_external_data=False)"
            )


def _node_domains(graph: Any) -> list[str]:
    out = []
    for node in graph.node:
        out.append(node.domain)
        for attribute in node.attribute:
            if attribute.HasField("g"):
                out += _node_domains(attribute.g)
            for sub in attribute.graphs:
                out += _node_domains(sub)
    return out


def _tensors(message: Any) -> list[Any]:
    """Every TensorProto anywhere in ``message``: initializers, sparse values and indices,
    node attributes, subgraphs and local functions alike (walked field by field, so no
    kind of tensor can be forgotten)."""
    from onnx import TensorProto

    out: list[Any] = []
    stack = [message]
    while stack:
        current = stack.pop()
        if isinstance(current, TensorProto):
            out.append(current)
            continue
        for field, value in current.ListFields():
            if field.message_type is None:
                continue
            # a single message has fields of its own; a repeated one is a container of them
            stack.extend([value] if hasattr(value, "ListFields") else list(value))
    return out


#: onnxruntime's type of a ZipMap output: a sequence of maps from class to a float
_ZIPMAP_TYPE = re.compile(r"seq\(map\((int64|string),\s*tensor\(float\)\)\)")


def _spec(node: Any) -> TensorSpec:
    kind = str(node.type)
    if _ZIPMAP_TYPE.fullmatch(kind):
        return TensorSpec(node.name, "float32", (-1, -1), ZIPMAP)
    if not kind.startswith("tensor("):
        return TensorSpec(node.name, "", None, kind)
    shape = node.shape
    dims = None if shape is None else tuple(d if isinstance(d, int) else -1 for d in shape)
    return TensorSpec(node.name, _DTYPES.get(kind, ""), dims, TENSOR)


def _zipmap_rows(name: str, maps: Any) -> np.ndarray:
    """A ZipMap's [{class: probability}] as a [batch, classes] array, classes sorted."""
    rows = list(maps)
    if not rows:
        return np.zeros((0, 0), dtype=np.float32)
    classes = sorted(rows[0])
    try:
        return np.asarray([[row[c] for c in classes] for row in rows], dtype=np.float32)
    except (KeyError, TypeError, ValueError):
        raise MappingError(
            f"output {name!r} holds maps with different classes from record to record",
            fix="export the model with skl2onnx's options={'zipmap': False}, which returns "
            "the probabilities as a tensor",
        ) from None


def _feed(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "string":
        return np.asarray(array, dtype=object)
    return array
