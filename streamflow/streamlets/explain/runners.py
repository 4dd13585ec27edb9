"""From a loaded model and a method to an explaining function, and from its result to a record.

The streamlet builds one explaining function per model version (SHAP's
explainers precompute the model's output over the background, and that is
worth doing once) and keeps it until the model changes. Building it for a
remote model wires SHAP's synchronous calls through the asynchronous serving
client: the function runs on the explain thread and hands each prediction to
the event loop, which is free while it waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from streamflow.api.streamlet import Record
from streamflow.streamlets.explain import methods
from streamflow.streamlets.serving import remote
from streamflow.streamlets.serving.follower import ActiveModel

__all__ = ["Explain", "Plan", "build", "explanation"]

Explain = Callable[[np.ndarray, np.ndarray], methods.Attributions]


@dataclasses.dataclass(frozen=True)
class Plan:
    """The method a model is explained with, and why it differs from the configured one."""

    method: str
    note: str = ""

    @property
    def symbol(self) -> str:
        """The Explanation schema's ExplanationMethod symbol."""
        return self.method.upper().replace("-", "_")


def build(
    plan: Plan,
    active: ActiveModel,
    *,
    baseline: np.ndarray | None,
    background: np.ndarray,
    steps: int,
    samples: int,
    clusters: int,
    loop: asyncio.AbstractEventLoop,
) -> Explain:
    """The explaining function for ``active`` (not for ``remote``, which is a call, not a model)."""
    if plan.method == "integrated-gradients":
        model, start = active.predictor, baseline
        assert start is not None

        def integrated(x: np.ndarray, targets: np.ndarray) -> methods.Attributions:
            return methods.integrated_gradients(
                model, x, baseline=start, targets=targets, steps=steps
            )

        return integrated
    if plan.method == "shap-gradient":
        return methods.shap_gradient(active.predictor.keras_model, background, samples=samples)
    return methods.kernel_explainer(
        predict_function(active, loop), background, clusters=clusters, samples=samples
    )


def predict_function(active: ActiveModel, loop: asyncio.AbstractEventLoop) -> methods.Predict:
    """A synchronous predict for SHAP, to call from a thread other than the loop's."""
    predictor = active.predictor
    if not isinstance(predictor, remote.InferenceClient):
        return lambda rows: np.asarray(predictor.predict(rows))
    return lambda rows: asyncio.run_coroutine_threadsafe(predictor.predict(rows), loop).result()


def explanation(
    record: Record,
    *,
    reason: str,
    active: ActiveModel,
    plan: Plan,
    features: Sequence[str],
    x: np.ndarray,
    prediction: np.ndarray,
    target: int,
    attributions: np.ndarray,
    baseline_output: float,
    baseline: np.ndarray | None,
    latency_ms: float,
) -> dict[str, Any]:
    """An Explanation record."""
    return {
        "key": record.key,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "model": active.name,
        "model_version": active.version,
        "method": plan.symbol,
        "reason": reason,
        "target": target,
        "prediction": [float(v) for v in np.ravel(prediction)],
        "baseline_prediction": baseline_output if np.isfinite(baseline_output) else None,
        "attributions": [
            {
                "feature": feature,
                "value": float(x[j]),
                "baseline": None if baseline is None else float(baseline[j]),
                "attribution": float(attributions[j]),
            }
            for j, feature in enumerate(features)
        ],
        "latency_ms": latency_ms,
        "time": dt.datetime.now(dt.UTC),
    }
