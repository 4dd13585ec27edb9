"""The one protocol every model kind speaks: named arrays in, named arrays out, per batch.

Embedded Keras, SavedModel and ONNX models and remote V1/V2 servers all
implement :class:`Predictor`, so serving, drift and explain never branch on the
kind. ``signature`` is what the model declares about its tensors (``None`` when
the kind cannot say, as with a V1 server), and it is what a tensor mapping is
checked against when a descriptor is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from streamflow.streamlets.serving.tensors import ModelSignature

__all__ = ["Predictor"]


@runtime_checkable
class Predictor(Protocol):
    description: str

    @property
    def signature(self) -> ModelSignature | None: ...

    async def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs, by name, for one batch of named inputs (batch first)."""
        ...

    async def aclose(self) -> None:
        """Release connections or sessions; the predictor is not used again."""
        ...
