"""The background an explanation is measured against: a dataset, or the first records seen.

SHAP fills "absent" features from a background sample, and integrated
gradients start from a baseline, usually the background's mean. A stable
background makes explanations comparable over time, so it is fixed once
taken: an allowlisted dataset (:mod:`streamflow.streamlets.datasets`), or else the
first N input records, never a moving window.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["BASELINES", "Background"]

BASELINES = ("mean", "median", "zeros")


class Background:
    """Up to ``size`` rows of model input, taken once."""

    def __init__(self, *, size: int, features: int) -> None:
        self.size = size
        self.features = features
        self._rows = np.zeros((0, features), dtype=np.float32)
        self.origin = f"the first {size} records"

    @property
    def ready(self) -> bool:
        return len(self._rows) >= self.size

    @property
    def rows(self) -> np.ndarray:
        return self._rows

    def use(self, rows: np.ndarray, *, origin: str) -> None:
        """Take a whole dataset as the background (its first ``size`` rows)."""
        matrix = np.asarray(rows, dtype=np.float32).reshape(-1, self.features)
        finite = matrix[np.isfinite(matrix).all(axis=1)]
        if not len(finite):
            raise ValueError("the background dataset has no complete rows")
        self._rows = finite[: self.size]
        self.size = len(self._rows)
        self.origin = origin

    def add(self, rows: np.ndarray) -> None:
        """Offer a batch's inputs; kept only until the background is full."""
        if self.ready:
            return
        finite = rows[np.isfinite(rows).all(axis=1)]
        self._rows = np.concatenate([self._rows, finite[: self.size - len(self._rows)]])

    def baseline(self, kind: str, explicit: Sequence[float] = ()) -> np.ndarray:
        """The integrated-gradients baseline: explicit values, or a statistic of the background."""
        if explicit:
            if len(explicit) != self.features:
                raise ValueError(
                    f"baseline_values has {len(explicit)} values for {self.features} input fields"
                )
            return np.asarray(explicit, dtype=np.float32)
        if kind == "zeros":
            return np.zeros(self.features, dtype=np.float32)
        statistic = np.median if kind == "median" else np.mean
        return np.asarray(statistic(self._rows, axis=0), dtype=np.float32)

    def needed_for(self, *, method: str, baseline: str, explicit: bool) -> bool:
        """Whether ``method`` must wait for the background."""
        if method == "integrated-gradients":
            return not explicit and baseline != "zeros"
        return method in ("shap-gradient", "shap-kernel")
