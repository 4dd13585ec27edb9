"""Attribution methods over a row of features: SHAP's Gradient and Kernel explainers, ``:explain``.

Each turns a batch of feature rows ``x`` (n, F) and the output each row is
explained for (``targets``, n) into per-feature attributions (n, F) and the
model's output at the baseline (n,). Integrated gradients, which work on named
tensors of any shape, live in :mod:`.gradients`.

* **SHAP GradientExplainer** (expected gradients) averages integrated
  gradients over baselines drawn from a background set; it needs the Keras
  model itself. A row is reshaped to the model's input shape (an image) for
  it, and the attributions flattened back.
* **SHAP KernelExplainer** is model-agnostic: it fits a weighted linear model
  to the predict function on coalitions of features, with absent features
  filled from a background summarised by k-means. The predict function may be
  an embedded model or a remote one (through the serving client).
* **Remote** ``:explain`` (KServe V1) sends the rows to an explainer server
  and reads attributions from its answer.

shap is imported when first used, so the explanation streamlet imports
without it.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from streamflow.models.remote import PermanentError

__all__ = [
    "Attributions",
    "kernel_explainer",
    "parse_explain",
    "shap_gradient",
]

Predict = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Attributions:
    values: np.ndarray  # (n, F)
    baseline_output: np.ndarray  # (n,): the target output at the baseline (or expected value)


def shap_gradient(
    keras_model: Any, background: np.ndarray, *, shape: Sequence[int], samples: int, seed: int = 0
) -> Callable[[np.ndarray, np.ndarray], Attributions]:
    """A function explaining rows with SHAP's GradientExplainer (expected gradients).

    Rows are flat; the model sees them with its per-record ``shape``.
    """
    import shap

    def shaped(rows: np.ndarray) -> np.ndarray:
        return rows.astype(np.float32).reshape(len(rows), *shape)

    explainer = shap.GradientExplainer(keras_model, shaped(background))
    expected = np.asarray(keras_model(shaped(background), training=False))
    expected = expected.reshape(len(background), -1).mean(axis=0)

    def explain(x: np.ndarray, targets: np.ndarray) -> Attributions:
        with warnings.catch_warnings():
            # shap passes the input as a list; Keras warns that it expected the named input
            warnings.filterwarnings("ignore", "The structure of `inputs`", UserWarning)
            values = explainer.shap_values(shaped(x), nsamples=samples, rseed=seed)
        chosen = _per_target(_flat(values, len(x), len(shape)), targets)
        return Attributions(chosen, expected[np.minimum(targets, len(expected) - 1)])

    return explain


def _flat(values: Any, rows: int, rank: int) -> Any:
    """SHAP's values for shaped inputs, per output (n, *shape[, outputs]) -> (n, F[, outputs])."""
    if isinstance(values, list):
        return [np.asarray(v).reshape(rows, -1) for v in values]
    array = np.asarray(values)
    outputs = array.ndim > rank + 1
    return array.reshape(rows, -1, array.shape[-1]) if outputs else array.reshape(rows, -1)


def kernel_explainer(
    predict: Predict, background: np.ndarray, *, clusters: int, samples: int
) -> Callable[[np.ndarray, np.ndarray], Attributions]:
    """A function explaining rows with SHAP's KernelExplainer over ``predict``."""
    import shap

    summary = shap.kmeans(background, clusters) if len(background) > clusters else background
    explainer = shap.KernelExplainer(lambda rows: predict(np.asarray(rows, np.float32)), summary)
    expected = np.asarray(explainer.expected_value, dtype=np.float64).reshape(-1)

    def explain(x: np.ndarray, targets: np.ndarray) -> Attributions:
        values = explainer.shap_values(x, nsamples=samples, silent=True)
        return Attributions(
            _per_target(values, targets), expected[np.minimum(targets, len(expected) - 1)]
        )

    return explain


def parse_explain(body: Any, rows: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(attributions as (rows, F) or (outputs, rows, F), expected values or None) from an answer.

    Understood: ``{"explanations": [[...F...] | {"attributions": [...]}, ...]}``, and
    alibi's ``{"data": {"shap_values": ..., "expected_value": ...}}`` or
    ``{"data": {"attributions": [...]}}`` (as KServe's alibi explainers answer).
    """
    try:
        if isinstance(body, dict) and "explanations" in body:
            items = body["explanations"]
            values = np.asarray(
                [i["attributions"] if isinstance(i, dict) else i for i in items], dtype=np.float64
            )
            return _checked(values, rows), None
        data = body["data"]
        if "shap_values" in data:
            expected = data.get("expected_value")
            return (
                _checked(np.asarray(data["shap_values"], dtype=np.float64), rows),
                None if expected is None else np.asarray(expected, dtype=np.float64).reshape(-1),
            )
        attributions = np.asarray(data["attributions"], dtype=np.float64)
        if attributions.ndim == 3 and attributions.shape[0] == 1:  # one tensor input
            attributions = attributions[0]
        return _checked(attributions, rows), None
    except (KeyError, TypeError, ValueError) as exc:
        raise PermanentError(f"the explainer's answer has no attributions: {exc}") from None


def _checked(values: np.ndarray, rows: int) -> np.ndarray:
    if values.ndim == 2 and values.shape[0] == rows:
        return values
    if values.ndim == 3 and values.shape[1] == rows:
        return values
    raise ValueError(f"attributions of shape {list(values.shape)} for {rows} rows")


def _per_target(values: Any, targets: np.ndarray) -> np.ndarray:
    """SHAP's values (a list per output, or (n, F, outputs)) for each row's target."""
    if isinstance(values, list):
        stacked = np.stack([np.asarray(v) for v in values], axis=-1)
    else:
        stacked = np.asarray(values)
    if stacked.ndim == 2:  # a single output
        return stacked.astype(np.float64)
    rows = np.arange(stacked.shape[0])
    return stacked[rows, :, np.minimum(targets, stacked.shape[-1] - 1)].astype(np.float64)
