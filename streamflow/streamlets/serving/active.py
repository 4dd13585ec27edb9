"""A loaded model, as the serving streamlets hold it (the stable one, and a candidate)."""

from __future__ import annotations

import dataclasses
from typing import Any

from streamflow.models import tensors
from streamflow.models.predictor import Predictor

__all__ = ["ActiveModel"]


@dataclasses.dataclass
class ActiveModel:
    """A loaded model, its identity, and the tensor mapping fitted to its signature."""

    name: str
    version: int
    kind: str
    predictor: Predictor
    description: str
    mapping: tensors.BoundMapping
    extra: Any = None  # what ``prepare`` built for this model

    @property
    def tag(self) -> str:
        return f"{self.name}:{self.version}"
