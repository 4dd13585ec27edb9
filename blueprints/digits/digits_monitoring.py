"""The digits classifier, monitored: drift detection and explanations on image tensors.

``monitored.yaml`` runs the classifier of ``classifier.yaml`` and, beside it,
off its hot path, a drift detector and an explainer. All three read the
images through the same ``inputs`` mapping (``pixels`` -> ``image``
[8, 8, 1]), so the detector compares, and the explainer attributes, the very
tensors the model sees. Both follow the classifier's model topic.

``DriftingDigitFeed`` is the example's generator with a drift switch: after
``drift_after`` records it moves each image ``drift_shift`` columns to the
right and adds Gaussian noise, as a camera knocked sideways with a dirtier
lens would, so the pixel distribution shifts and an alert fires::

    streamflow run blueprints/digits/monitored.yaml --set samples.drift_after=3000
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
from digits_app import IMAGE_SCHEMA, PREDICTION_SCHEMA, DigitFeed

from streamflow import ControlInlet, Emit, Inlet, Record, Streamlet, params
from streamflow.streamlets.drift import DriftDetector
from streamflow.streamlets.explain import ModelExplainer

DRIFT_REPORT = "streamflow.ml.DriftReport"
EXPLANATION = "streamflow.ml.Explanation"


def shifted(pixels: Any, *, columns: int, noise: float, rng: np.random.Generator) -> list[Any]:
    """The image moved `columns` to the right (ink leaves at the edge), plus noise, in 0..1."""
    image = np.asarray(pixels, dtype=np.float32)
    moved = np.zeros_like(image)
    if columns < image.shape[1]:
        moved[:, columns:] = image[:, : image.shape[1] - columns]
    if noise:
        moved += rng.normal(0.0, noise, size=moved.shape).astype(np.float32)
    return np.clip(moved, 0.0, 1.0).tolist()


class DriftingDigitFeed(DigitFeed):
    """Replays the digits; after ``drift_after`` records, shifts and noises every image."""

    drift_after = params.Int(default=0, min=0, description="records before the shift; 0: never")
    drift_shift = params.Int(default=2, min=0, max=8, description="columns moved to the right")
    drift_noise = params.Float(default=0.1, min=0.0, description="std of the noise added after")
    drift_seed = params.Int(default=0, description="seed of the noise")

    def source(self) -> Iterator[Emit]:
        rng = np.random.default_rng(self.drift_seed)
        for index, item in enumerate(super().source()):
            if self.drift_after and index >= self.drift_after:
                pixels = shifted(
                    item.value["pixels"], columns=self.drift_shift, noise=self.drift_noise, rng=rng
                )
                item = dataclasses.replace(item, value={**item.value, "pixels": pixels})
            yield item


class DigitDrift(DriftDetector):
    """Watches the classifier's images and predictions for drift."""

    inp = Inlet("in", IMAGE_SCHEMA)
    outputs = Inlet("outputs", PREDICTION_SCHEMA)


class DigitExplainer(ModelExplainer):
    """Explains sampled and unsure predictions, pixel by pixel; more while drift is reported."""

    inp = Inlet("in", IMAGE_SCHEMA)
    drift = ControlInlet("drift", DRIFT_REPORT)


class DriftAlertLogger(Streamlet):
    """Logs each drift alert as one line."""

    inp = Inlet("in", DRIFT_REPORT)

    def process(self, record: Record) -> None:
        report = record.value
        verdict = f"DRIFT ({report['severity']})" if report["drifted"] else "drift cleared"
        self.context.logger.warning(
            "%s in the %s of %s:%s, window %d: %s",
            verdict,
            report["source"],
            report["model"] or "the model",
            report["model_version"],
            report["window"]["index"],
            report["message"],
        )


class ExplanationLogger(Streamlet):
    """Logs every Nth explanation: the prediction and the pixels that weighed most."""

    inp = Inlet("in", EXPLANATION)
    every = params.Int(default=10, min=1, description="log one line per this many explanations")
    top = params.Int(default=4, min=1, description="pixels per line")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.count = 0

    def process(self, record: Record) -> None:
        self.count += 1
        if self.count % self.every:
            return
        value = record.value
        strongest = sorted(value["attributions"], key=lambda a: -abs(a["attribution"]))
        pixels = ", ".join(f"{a['feature']} {a['attribution']:+.3f}" for a in strongest[: self.top])
        self.context.logger.info(
            "%s: digit %d (p=%.2f) by %s:%s, %s: %s",
            value["key"],
            value["target"],
            value["prediction"][value["target"]],
            value["model"],
            value["model_version"],
            value["reason"].lower().replace("_", "-"),
            pixels,
        )
