"""Embedded models: a Keras file, a TensorFlow SavedModel or an ONNX model, inside the replica.

Every kind is a :class:`~.predictor.Predictor`: named arrays in, named arrays out,
one call per batch. TensorFlow and onnxruntime are imported only here and only
when a model of their kind is loaded, so the serving streamlet (and its remote
mode) works without either extra.

Keras files load with ``safe_mode=True``: no arbitrary Python (lambdas,
pickles) runs from an artifact, and their zip is counted against the unpack
limits first. A SavedModel is a graph that can touch files, so it loads only
when the streamlet allows SavedModels, and only after :mod:`.graph_guard` has
read its graph and found no denied op. Every input's batch dimension is left dynamic
in the traced function, so batches of any size reuse one graph instead of
retracing per size. ONNX models are checked before a session is made: custom
operator domains and external data files are refused (:mod:`.onnx_model`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from streamflow.models import artifacts, graph_guard
from streamflow.models.embedded_model import EmbeddedModel
from streamflow.models.kinds import ModelKind
from streamflow.models.tensors import ModelSignature, TensorSpec

__all__ = ["SAVED_MODEL_OFF", "EmbeddedModel", "load_embedded"]

_TF_LOCK = threading.Lock()  # TensorFlow's lazy initialisation is not thread-safe

_TF_DTYPES = {
    "float32": "float32",
    "float64": "float64",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
    "string": "string",
}


def load_embedded(
    *,
    kind: str,
    artifact: Path,
    parameters: Mapping[str, str],
    cache_dir: Path,
    limits: artifacts.Limits | None = None,
    allow_saved_model: bool = False,
) -> EmbeddedModel:
    """Load a verified artifact of an embedded kind; raises ArtifactError when it is refused."""
    limits = limits or artifacts.Limits()
    if kind == ModelKind.ONNX:
        from streamflow.models import onnx_model

        return onnx_model.load(artifact, parameters=parameters)
    if kind == ModelKind.TF_SAVED_MODEL and not allow_saved_model:
        raise artifacts.ArtifactError(SAVED_MODEL_OFF)
    if kind == ModelKind.KERAS:  # counted from the zip's directory before Keras reads any of it
        artifacts.check_zip(artifact, limits=limits)
    with _TF_LOCK:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter
        import tensorflow as tf

        if kind == ModelKind.KERAS:
            return _keras(tf, artifact)
        directory = artifacts.unpack(artifact, into=cache_dir, limits=limits)
        try:  # read, not run: a refused graph never reaches tf.saved_model.load
            graph_guard.check_saved_model(directory)
        except graph_guard.GraphRefused as exc:
            raise artifacts.ArtifactError(str(exc)) from None
        return _saved_model(tf, directory, parameters)


SAVED_MODEL_OFF = (
    "SavedModel loading is off for this streamlet: a SavedModel is a program that runs "
    "with the replica's rights; set allow_saved_model: true to accept them "
    "(see SECURITY.md), or push a Keras or ONNX model"
)


def _dtype_name(tf_dtype: Any) -> str:
    return _TF_DTYPES.get(getattr(tf_dtype, "name", str(tf_dtype)), "")


def _dims(shape: Any) -> tuple[int, ...] | None:
    try:
        return tuple(-1 if d is None else int(d) for d in shape)
    except (TypeError, ValueError):
        return None  # unknown rank


def _to_tf(tf: Any, dtypes: Mapping[str, Any]) -> Callable[[str, np.ndarray], Any]:
    def convert(name: str, array: np.ndarray) -> Any:
        dtype = dtypes.get(name)
        if dtype is not None and dtype == tf.string and array.dtype == object:
            array = np.vectorize(_utf8, otypes=[object])(array) if array.size else array
        return tf.constant(array, dtype=dtype)

    return convert


def _utf8(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _keras(tf: Any, artifact: Path) -> EmbeddedModel:
    import keras

    # keras insists on the extension; the cache names files by digest
    link = artifact.with_name(artifact.name + ".keras")
    # replicas on one machine share the cache: another may have made the link first
    with contextlib.suppress(FileExistsError):
        link.symlink_to(artifact.name)
    try:
        model = keras.models.load_model(link, safe_mode=True, compile=False)
    except Exception as exc:
        raise artifacts.ArtifactError(f"not a loadable Keras model: {exc}") from None
    input_names, input_tensors, by_name = _keras_side(model, "input")
    output_names, output_tensors, _ = _keras_side(model, "output")
    specs = [
        tf.TensorSpec([None, *t.shape[1:]], tf.dtypes.as_dtype(t.dtype), name=n)
        for n, t in zip(input_names, input_tensors, strict=True)
    ]
    dtypes = {n: s.dtype for n, s in zip(input_names, specs, strict=True)}

    def structure(args: tuple[Any, ...]) -> Any:
        if by_name:  # built with dict inputs: called with the same keys
            return dict(zip(input_names, args, strict=True))
        return args[0] if len(args) == 1 else list(args)

    def forward(*args: Any) -> dict[str, Any]:
        result = model(structure(args), training=False)
        if isinstance(result, Mapping):
            return {str(k): v for k, v in result.items()}
        if not isinstance(result, list | tuple):
            result = [result]
        return dict(zip(output_names, result, strict=True))

    traced = tf.function(forward, input_signature=specs)

    def call(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        missing = [n for n in input_names if n not in inputs]
        if missing:
            raise ValueError(f"the model needs input(s) {', '.join(missing)}")
        return traced(*(inputs[n] for n in input_names))  # type: ignore[no-any-return]

    signature = ModelSignature(
        inputs={
            n: TensorSpec(n, _dtype_name(s.dtype), _dims(s.shape))
            for n, s in zip(input_names, specs, strict=True)
        },
        outputs={
            n: TensorSpec(n, _dtype_name(tf.dtypes.as_dtype(t.dtype)), _dims(t.shape))
            for n, t in zip(output_names, output_tensors, strict=True)
        },
    )
    return EmbeddedModel(
        call,
        signature=signature,
        description=f"keras:{model.name}",
        keras_model=model,
        to_tensor=_to_tf(tf, dtypes),
    )


def _keras_side(model: Any, side: str) -> tuple[list[str], list[Any], bool]:
    """The names and tensors of a Keras model's inputs or outputs, and whether by dict.

    A model built with dicts is called (and answers) with the dict's keys, which need
    not be its layers' names; otherwise the layer names are the tensors' names.
    """
    structure = getattr(model, side, None)
    if isinstance(structure, Mapping):
        return [str(k) for k in structure], list(structure.values()), True
    tensors = list(getattr(model, f"{side}s"))
    names = [_keras_name(t) for t in tensors]
    if side == "output":
        declared = list(getattr(model, "output_names", None) or [])
        names = declared if len(declared) == len(tensors) else names
    return names, tensors, False


def _keras_name(tensor: Any) -> str:
    """A Keras tensor's layer name (``image``, not ``image:0`` or ``keras_tensor_3``)."""
    history = getattr(tensor, "_keras_history", None)
    layer = getattr(history, "operation", None) or (history[0] if history else None)
    name = getattr(layer, "name", None) or getattr(tensor, "name", "")
    return str(name).split(":")[0]


def _saved_model(tf: Any, directory: Path, parameters: Mapping[str, str]) -> EmbeddedModel:
    try:
        loaded = tf.saved_model.load(str(directory))
    except Exception as exc:
        raise artifacts.ArtifactError(f"not a loadable SavedModel: {exc}") from None
    name = parameters.get("signature", "serving_default")
    function = loaded.signatures.get(name)
    if function is None:
        raise artifacts.ArtifactError(
            f"the SavedModel has no signature {name!r} (it has: {', '.join(loaded.signatures)})"
        )
    inputs = function.structured_input_signature[1]
    outputs = function.structured_outputs
    dtypes = {n: spec.dtype for n, spec in inputs.items()}

    def call(feed: Mapping[str, Any]) -> Mapping[str, Any]:
        return function(**{n: feed[n] for n in inputs})  # type: ignore[no-any-return]

    # keep the loaded object alive: the signature's variables belong to it
    call.loaded = loaded  # type: ignore[attr-defined]
    signature = ModelSignature(
        inputs={n: TensorSpec(n, _dtype_name(s.dtype), _dims(s.shape)) for n, s in inputs.items()},
        outputs={
            n: TensorSpec(n, _dtype_name(t.dtype), _dims(t.shape)) for n, t in outputs.items()
        },
    )
    return EmbeddedModel(
        call,
        signature=signature,
        description=f"saved_model:{name}",
        to_tensor=_to_tf(tf, dtypes),
    )
