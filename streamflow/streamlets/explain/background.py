"""The background an explanation is measured against: a dataset, or the first records seen.

SHAP fills "absent" features from a background sample, and integrated
gradients start from a baseline, often the background's mean. A row is the
model's float inputs flattened side by side (:class:`~.scope.Layout`). A stable
background makes explanations comparable over time, so it is fixed once
taken: an allowlisted dataset (:mod:`streamflow.streamlets.datasets`), or else the
first N input records, never a moving window.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from streamflow.streamlets import datasets
from streamflow.streamlets.explain import scope

__all__ = ["BASELINES", "Background", "background_rows"]

#: ``auto``: the mean for feature vectors, zeros for tensors such as images (see :mod:`.scope`)
BASELINES = ("auto", "mean", "median", "zeros")


class Background:
    """Up to ``size`` rows of model input, taken once."""

    def __init__(self, *, size: int, features: int) -> None:
        self.size = size
        self.features = features
        self._rows = np.zeros((0, features), dtype=np.float32)
        self.origin = f"the first {size} records"
        self.from_records = True  # until a dataset is used

    def restore(self, rows: np.ndarray) -> None:
        """The first records' rows as kept so far (the streamlet's state holds them)."""
        self._rows = np.asarray(rows, dtype=np.float32).reshape(-1, self.features)[: self.size]

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
        self.from_records = False

    def add(self, rows: np.ndarray) -> np.ndarray:
        """Offer a batch's inputs; kept only until the background is full. Returns the
        indexes (in ``rows``) of those kept."""
        if self.ready:
            return np.zeros(0, dtype=np.int64)
        taken = np.flatnonzero(np.isfinite(rows).all(axis=1))[: self.size - len(self._rows)]
        self._rows = np.concatenate([self._rows, rows[taken]])
        return taken

    def baseline(self, kind: str, explicit: Sequence[float] = ()) -> np.ndarray:
        """The integrated-gradients baseline: explicit values, or a statistic of the background."""
        if explicit:
            if len(explicit) != self.features:
                raise ValueError(
                    f"baseline_values has {len(explicit)} values for {self.features} float "
                    "input features"
                )
            return np.asarray(explicit, dtype=np.float32)
        if kind == "zeros":
            return np.zeros(self.features, dtype=np.float32)
        statistic = np.median if kind == "median" else np.mean
        return np.asarray(statistic(self._rows, axis=0), dtype=np.float32)


def background_rows(
    layout: scope.Layout,
    *,
    location: str,
    sha256: str | None,
    allowlist: Sequence[str],
    cache_dir: Path,
) -> np.ndarray:
    """A dataset's rows of the model's float features (its flat numeric fields)."""
    tensor = next((s for s in layout.specs.values() if not s.stacked), None)
    if tensor is not None or not layout.specs:
        raise ValueError(
            "a dataset is read as numeric columns (input_fields), and "
            + (tensor.describe() if tensor else "the model has no float input")
        )
    fields = [f for spec in layout.specs.values() for f in spec.fields]
    columns = datasets.load_columns(
        location=location, sha256=sha256, allowlist=allowlist, cache_dir=cache_dir, numeric=fields
    )
    return np.column_stack([columns[f] for f in fields])
