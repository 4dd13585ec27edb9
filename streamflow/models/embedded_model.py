"""The model object every embedded kind loads into (Keras, SavedModel, ONNX).

Apart from :mod:`.embedded`, which loads Keras files and SavedModels, so that
:mod:`.onnx_model` can build one without importing the TensorFlow loaders (and
the two loaders do not import each other).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from streamflow.models.predictor import Gradients
from streamflow.models.tensors import ModelSignature

__all__ = ["EmbeddedModel"]


class EmbeddedModel:
    """A model inside the replica: ``run`` maps named input arrays to named output arrays.

    ``call_named`` is the same function on tensors, so an explainer can
    differentiate it under ``tf.GradientTape`` (``differentiable`` says whether it
    can); ``keras_model`` is the Keras model, when it is one.
    """

    def __init__(
        self,
        fn: Callable[[Mapping[str, Any]], Mapping[str, Any]],
        *,
        signature: ModelSignature,
        description: str,
        keras_model: Any = None,
        differentiable: bool = True,
        to_tensor: Callable[[str, np.ndarray], Any] | None = None,
    ) -> None:
        self._fn = fn
        self._signature = signature
        self.description = description
        self.keras_model = keras_model
        self.differentiable = differentiable
        self._to_tensor = to_tensor or (lambda _name, array: array)

    @property
    def signature(self) -> ModelSignature:
        return self._signature

    @property
    def remote(self) -> bool:
        return False

    @property
    def gradients(self) -> Gradients | None:
        return Gradients(self.call_named, self.keras_model) if self.differentiable else None

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for one batch, as numpy arrays by output name."""
        tensors = {name: self._to_tensor(name, array) for name, array in inputs.items()}
        return {name: _numpy(value) for name, value in self._fn(tensors).items()}

    async def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.run(inputs)

    def infer_blocking(
        self, inputs: Mapping[str, np.ndarray], *, loop: asyncio.AbstractEventLoop
    ) -> dict[str, np.ndarray]:
        return self.run(inputs)  # on the calling thread: the loop stays free

    def call_named(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The outputs as the framework returns them (tensors, for gradients)."""
        return dict(self._fn(inputs))

    async def aclose(self) -> None:
        return None


def _numpy(value: Any) -> np.ndarray:
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    return array
