"""From a loaded model and its plan to an explaining function, and from its result to records.

The streamlet builds one explaining function per model version (SHAP's
explainers precompute the model's output over the background, and that is
worth doing once) and keeps it until the model changes. Every function takes
the records' named input tensors and answers attributions per explained
input, whatever the method: integrated gradients work on the tensors
themselves; SHAP sees the feature row (:class:`~.scope.Layout`) and its
attributions are split back into tensors. Building one for a remote model
wires SHAP's synchronous calls through the asynchronous serving client: the
function runs on the explain thread and hands each prediction to the event
loop, which is free while it waits.

A record gets one ``Explanation`` per explained input, not one for all: each
then stands alone, with its input's name and shape, so a consumer can draw an
image's attributions as a heat map without knowing the model's other inputs,
and a flat-feature model's explanation is exactly what it was before inputs
had names. Completeness holds over a record's explanations together: their
attributions sum to ``prediction[target] - baseline_prediction``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from streamflow.api.streamlet import Record
from streamflow.streamlets.explain import gradients, methods, scope
from streamflow.streamlets.serving.follower import ActiveModel

__all__ = ["Explain", "baselines", "build", "explanations", "predict_function"]

Explain = Callable[[Mapping[str, np.ndarray], np.ndarray], gradients.TensorAttributions]


def build(
    plan: scope.Plan,
    active: ActiveModel,
    *,
    baselines: Mapping[str, np.ndarray],
    background: np.ndarray,
    steps: int,
    samples: int,
    clusters: int,
    loop: asyncio.AbstractEventLoop,
) -> Explain:
    """The explaining function for ``active`` (not for ``remote``, which is a call, not a model)."""
    layout = plan.layout
    model = active.predictor.gradients
    if plan.method == "integrated-gradients":
        assert model is not None, "the plan chose gradients for a model without them"
        call = model.call

        def integrated(
            inputs: Mapping[str, np.ndarray], targets: np.ndarray
        ) -> gradients.TensorAttributions:
            return gradients.integrated_gradients(
                call,
                inputs,
                explained=plan.explained,
                baselines=baselines,
                output=plan.output,
                targets=targets,
                steps=steps,
            )

        return integrated
    if plan.method == "shap-gradient":
        assert model is not None, "the plan chose gradients for a model without them"
        shape = next(iter(layout.specs.values())).shape
        flat = methods.shap_gradient(model.keras_model, background, shape=shape, samples=samples)
    else:
        flat = methods.kernel_explainer(
            predict_function(active, plan, loop),
            background,
            clusters=clusters,
            samples=samples,
        )

    def on_rows(
        inputs: Mapping[str, np.ndarray], targets: np.ndarray
    ) -> gradients.TensorAttributions:
        return tensor_attributions(layout, flat(layout.flatten(inputs), targets))

    return on_rows


def baselines(
    plan: scope.Plan, *, background: np.ndarray, explicit: np.ndarray | None
) -> dict[str, np.ndarray] | None:
    """Per explained input: the IG baseline, SHAP's background mean, or None (remote)."""
    if plan.method == "remote":
        return None
    if plan.method != "integrated-gradients":
        return plan.layout.split(np.mean(background, axis=0).astype(np.float32))
    if plan.baseline == "values" and explicit is not None:
        return plan.layout.split(explicit)
    if plan.baseline == "zeros":
        return {name: np.zeros((), dtype=np.float32) for name in plan.explained}
    statistic = np.median if plan.baseline == "median" else np.mean
    return plan.layout.split(np.asarray(statistic(background, axis=0), dtype=np.float32))


def tensor_attributions(
    layout: scope.Layout, flat: methods.Attributions
) -> gradients.TensorAttributions:
    """Attributions over feature rows, split back into the inputs' tensors."""
    return gradients.TensorAttributions(layout.split(flat.values), flat.baseline_output)


def predict_function(
    active: ActiveModel, plan: scope.Plan, loop: asyncio.AbstractEventLoop
) -> methods.Predict:
    """A synchronous predict over feature rows for SHAP, to call from a thread other than the
    loop's: the explained output, flattened per row."""
    predictor, layout = active.predictor, plan.layout

    def outputs(rows: np.ndarray) -> Mapping[str, np.ndarray]:
        return predictor.infer_blocking(layout.split(np.asarray(rows, dtype=np.float32)), loop=loop)

    def predict(rows: np.ndarray) -> np.ndarray:
        chosen = np.asarray(gradients.pick_output(outputs(rows), plan.output))
        return chosen.reshape(len(rows), -1).astype(np.float64)

    return predict


def explanations(
    record: Record,
    *,
    reason: str,
    active: ActiveModel,
    plan: scope.Plan,
    inputs: Mapping[str, np.ndarray],
    attributions: Mapping[str, np.ndarray],
    baselines: Mapping[str, np.ndarray] | None,
    prediction: np.ndarray,
    target: int,
    baseline_output: float,
    latency_ms: float,
) -> list[dict[str, Any]]:
    """One Explanation record per explained input of one record (tensors per record)."""
    common = {
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
        "latency_ms": latency_ms,
        "fixed_inputs": list(plan.fixed),
        "time": dt.datetime.now(dt.UTC),
    }
    out = []
    for name in plan.explained:
        value = np.asarray(inputs[name])
        shape = tuple(int(d) for d in value.shape)
        start = (
            None
            if baselines is None
            else np.broadcast_to(np.asarray(baselines[name], dtype=np.float64), shape).ravel()
        )
        features = plan.layout.feature_names(name, shape)
        attributed = np.asarray(attributions[name], dtype=np.float64).ravel()
        out.append(
            {
                **common,
                "input": name,
                "shape": list(shape),
                "attributions": [
                    {
                        "feature": feature,
                        "value": float(x),
                        "baseline": None if start is None else float(start[j]),
                        "attribution": float(attributed[j]),
                    }
                    for j, (feature, x) in enumerate(zip(features, value.ravel(), strict=True))
                ],
            }
        )
    return out
