"""Embedded models: a Keras file or a TensorFlow SavedModel, inside the replica.

TensorFlow is imported only here and only when a model is loaded, so the
serving streamlet (and its remote mode) works without the ``tf`` extra.
Keras files load with ``safe_mode=True``: no arbitrary Python (lambdas,
pickles) runs from an artifact. The batch is the unit of inference: one call
per batch, with the batch dimension left dynamic so batches of any size reuse
one traced graph instead of retracing per size.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from streamflow.streamlets.serving import artifacts

__all__ = ["EmbeddedModel", "load_embedded"]

_TF_LOCK = threading.Lock()  # TensorFlow's lazy initialisation is not thread-safe


class EmbeddedModel:
    """A callable from a (batch, features) float32 array to a (batch, outputs) array.

    ``call`` is the same function on tensors, so an explainer can differentiate it
    under ``tf.GradientTape``; ``keras_model`` is the Keras model, when it is one.
    """

    def __init__(
        self, fn: Any, *, output_name: str | None, description: str, keras_model: Any = None
    ) -> None:
        self._fn = fn
        self._output_name = output_name
        self.description = description
        self.keras_model = keras_model

    def predict(self, batch: np.ndarray) -> np.ndarray:
        return np.asarray(self.call(batch))

    def call(self, batch: Any) -> Any:
        """The model's (chosen) output for a batch, as the tensor TensorFlow returns."""
        result = self._fn(batch)
        if isinstance(result, Mapping):
            if self._output_name is None:
                if len(result) != 1:
                    raise ValueError(
                        f"the model has outputs {sorted(result)}; set the parameter output_name"
                    )
                result = next(iter(result.values()))
            else:
                result = result[self._output_name]
        return result

    def warm_up(self, features: int) -> None:
        """One inference on zeros, so the first real batch does not pay for tracing."""
        for size in (1, 8):
            self.predict(np.zeros((size, features), dtype=np.float32))


def load_embedded(
    *, kind: str, artifact: Path, parameters: Mapping[str, str], cache_dir: Path
) -> EmbeddedModel:
    with _TF_LOCK:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter
        import tensorflow as tf

        if kind == "KERAS":
            return _keras(tf, artifact)
        directory = artifacts.unpack(artifact, into=cache_dir)
        return _saved_model(tf, directory, parameters)


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
    spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], tf.float32)
    fn = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    return EmbeddedModel(fn, output_name=None, description=f"keras:{model.name}", keras_model=model)


def _saved_model(tf: Any, directory: Path, parameters: Mapping[str, str]) -> EmbeddedModel:
    try:
        loaded = tf.saved_model.load(str(directory))
    except Exception as exc:
        raise artifacts.ArtifactError(f"not a loadable SavedModel: {exc}") from None
    name = parameters.get("signature", "serving_default")
    signature = loaded.signatures.get(name)
    if signature is None:
        raise artifacts.ArtifactError(
            f"the SavedModel has no signature {name!r} (it has: {', '.join(loaded.signatures)})"
        )
    inputs = signature.structured_input_signature[1]
    input_name = parameters.get("input_name") or (next(iter(inputs)) if len(inputs) == 1 else "")
    if input_name not in inputs:
        raise artifacts.ArtifactError(
            f"signature {name!r} has inputs {sorted(inputs)}; set the parameter input_name"
        )
    output_name = parameters.get("output_name") or None
    outputs = signature.structured_outputs
    if output_name is not None and output_name not in outputs:
        raise artifacts.ArtifactError(
            f"signature {name!r} has outputs {sorted(outputs)}, not {output_name!r}"
        )

    def call(batch: Any) -> Any:
        return signature(**{input_name: tf.constant(batch, dtype=inputs[input_name].dtype)})

    # keep the loaded object alive: the signature's variables belong to it
    call.loaded = loaded  # type: ignore[attr-defined]
    return EmbeddedModel(call, output_name=output_name, description=f"saved_model:{name}")
