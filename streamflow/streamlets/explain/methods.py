"""Attribution methods: integrated gradients, SHAP's Gradient and Kernel explainers, ``:explain``.

Each turns a batch of inputs ``x`` (n, F) and the output each row is
explained for (``targets``, n) into per-feature attributions (n, F) and the
model's output at the baseline (n,):

* **Integrated gradients** (Sundararajan et al., 2017) integrate the gradient
  of the target output along the straight path from a baseline to the input:
  ``(x - b) * mean over alpha of grad f(b + alpha (x - b))``. The integral is
  a trapezoid rule over ``steps`` intervals, for all rows and steps in one
  ``tf.GradientTape`` pass. They are *complete*: the attributions sum to
  ``f(x) - f(b)``, exactly for a linear model and up to the quadrature error
  otherwise, which is why every explanation can be checked.
* **SHAP GradientExplainer** (expected gradients) averages integrated
  gradients over baselines drawn from a background set; it needs the Keras
  model itself.
* **SHAP KernelExplainer** is model-agnostic: it fits a weighted linear model
  to the predict function on coalitions of features, with absent features
  filled from a background summarised by k-means. The predict function may be
  an embedded model or a remote one (through the serving client).
* **Remote** ``:explain`` (KServe V1) sends the rows to an explainer server
  and reads attributions from its answer.

TensorFlow and shap are imported when first used, so the explanation
streamlet imports without them.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from streamflow.streamlets.serving.embedded import EmbeddedModel
from streamflow.streamlets.serving.remote import PermanentError

__all__ = [
    "Attributions",
    "NotDifferentiable",
    "differentiable",
    "integrated_gradients",
    "kernel_explainer",
    "parse_explain",
    "shap_gradient",
]

Predict = Callable[[np.ndarray], np.ndarray]
_MAX_PATH_ROWS = 32_768  # rows per gradient pass: bounds the tape's memory


class NotDifferentiable(Exception):
    """The model's output has no gradient with respect to its input."""


@dataclasses.dataclass(frozen=True)
class Attributions:
    values: np.ndarray  # (n, F)
    baseline_output: np.ndarray  # (n,): the target output at the baseline (or expected value)


def differentiable(model: EmbeddedModel, *, features: int) -> str:
    """ "" if the first output has a gradient at a zero input; else why it has none."""
    import tensorflow as tf

    probe = tf.zeros((1, features), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(probe)
        output = model.call(probe)
        first = tf.reshape(output, (1, -1))[:, 0]
    if tape.gradient(first, probe) is None:
        return "its output has no gradient with respect to its input (a non-differentiable op)"
    return ""


def integrated_gradients(
    model: EmbeddedModel,
    x: np.ndarray,
    *,
    baseline: np.ndarray,
    targets: np.ndarray,
    steps: int,
) -> Attributions:
    """Integrated gradients of each row's target output, from ``baseline`` to the row."""
    x = np.asarray(x, dtype=np.float32)
    per_pass = max(1, _MAX_PATH_ROWS // (steps + 1))
    values, base = [], []
    for start in range(0, len(x), per_pass):
        chunk = slice(start, start + per_pass)
        v, b = _ig_chunk(model, x[chunk], baseline, targets[chunk], steps)
        values.append(v)
        base.append(b)
    return Attributions(np.concatenate(values), np.concatenate(base))


def _ig_chunk(
    model: EmbeddedModel, x: np.ndarray, baseline: np.ndarray, targets: np.ndarray, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    import tensorflow as tf

    n, features = x.shape
    alphas = np.linspace(0.0, 1.0, steps + 1, dtype=np.float32)
    weights = np.full(steps + 1, 1.0 / steps)
    weights[[0, -1]] /= 2  # the trapezoid rule
    delta = x - baseline[None, :]
    paths = tf.constant(
        (baseline[None, None, :] + alphas[:, None, None] * delta[None]).reshape(-1, features)
    )
    chosen = tf.constant(np.tile(targets, steps + 1).astype(np.int32))
    with tf.GradientTape() as tape:
        tape.watch(paths)
        output = tf.reshape(model.call(paths), (len(alphas) * n, -1))
        picked = tf.gather(output, chosen, axis=1, batch_dims=1)
    gradients = tape.gradient(picked, paths)
    if gradients is None:
        raise NotDifferentiable("the model's output has no gradient with respect to its input")
    grid = gradients.numpy().reshape(len(alphas), n, features).astype(np.float64)
    average = np.tensordot(weights, grid, axes=1)
    at_baseline = picked.numpy().reshape(len(alphas), n)[0].astype(np.float64)
    return delta * average, at_baseline


def shap_gradient(
    keras_model: Any, background: np.ndarray, *, samples: int, seed: int = 0
) -> Callable[[np.ndarray, np.ndarray], Attributions]:
    """A function explaining rows with SHAP's GradientExplainer (expected gradients)."""
    import shap

    explainer = shap.GradientExplainer(keras_model, background.astype(np.float32))
    expected = np.asarray(keras_model(background.astype(np.float32), training=False)).mean(axis=0)

    def explain(x: np.ndarray, targets: np.ndarray) -> Attributions:
        with warnings.catch_warnings():
            # shap passes the input as a list; Keras warns that it expected the named input
            warnings.filterwarnings("ignore", "The structure of `inputs`", UserWarning)
            values = explainer.shap_values(x.astype(np.float32), nsamples=samples, rseed=seed)
        chosen = _per_target(values, targets)
        return Attributions(chosen, np.asarray(expected).reshape(-1)[targets])

    return explain


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
