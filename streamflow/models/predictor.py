"""The one protocol every model kind speaks: named arrays in, named arrays out, per batch.

Embedded Keras, SavedModel and ONNX models and remote V1/V2 servers all
implement :class:`Predictor`, so serving, drift and explain never branch on the
kind. ``signature`` is what the model declares about its tensors (``None`` when
the kind cannot say, as with a V1 server), and it is what a tensor mapping is
checked against when a descriptor is applied.

What differs between kinds is a property of the predictor, not a type test:
whether the model runs inside the replica (``remote``), how a worker thread
calls it (``infer_blocking``: an embedded model runs on that thread, a remote
one hands the request to the event loop), and whether gradient explainers can
see into it (``gradients``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from streamflow.models.tensors import ModelSignature

__all__ = ["Gradients", "NamedCall", "Predictor"]

#: A differentiable model: named input tensors to named output tensors.
NamedCall = Callable[[Mapping[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True)
class Gradients:
    """What gradient-based explainers see of a model that exposes its gradients.

    ``call`` is the model on the framework's tensors (so it can run under
    ``tf.GradientTape``); ``keras_model`` is the Keras model itself, when it is one
    (SHAP's GradientExplainer needs it).
    """

    call: NamedCall
    keras_model: Any = None


@runtime_checkable
class Predictor(Protocol):
    description: str

    @property
    def signature(self) -> ModelSignature | None: ...

    @property
    def remote(self) -> bool:
        """True when the model runs on a model server, False when inside the replica."""
        ...

    @property
    def gradients(self) -> Gradients | None:
        """The model for gradient explainers; None when it exposes none (remote, ONNX)."""
        ...

    async def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs, by name, for one batch of named inputs (batch first)."""
        ...

    def infer_blocking(
        self, inputs: Mapping[str, np.ndarray], *, loop: asyncio.AbstractEventLoop
    ) -> dict[str, np.ndarray]:
        """``infer`` from a thread other than ``loop``'s, which must be running (SHAP's calls)."""
        ...

    async def aclose(self) -> None:
        """Release connections or sessions; the predictor is not used again."""
        ...
