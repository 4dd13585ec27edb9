"""The wine classifier, monitored: drift detection and explanations beside serving.

``monitored.yaml`` runs the classifier of ``classifier.yaml`` and, beside it,
off its hot path, a drift detector (the classifier's inputs and outputs
against a reference) and an explainer (integrated gradients for a sample of
predictions and every unsure one). Both follow the classifier's model topic,
so they always watch and explain the version that is serving.

``DriftingWineFeed`` is the example's generator with a drift switch:
``drift_after`` records in, it scales a few measurements, as a change of
supplier or of a lab's calibration would, so a drift alert fires::

    streamflow run blueprints/wine/monitored.yaml --set samples.drift_after=1000
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from classifier_app import FEATURES_SCHEMA, PREDICTION_SCHEMA, WineFeed

from streamflow import ControlInlet, Emit, Inlet, Record, Streamlet, params
from streamflow.streamlets.drift import DriftDetector
from streamflow.streamlets.explain import ModelExplainer

DRIFT_REPORT = "streamflow.ml.DriftReport"
EXPLANATION = "streamflow.ml.Explanation"


class DriftingWineFeed(WineFeed):
    """Replays the wine data set; after ``drift_after`` records, scales some measurements."""

    drift_after = params.Int(default=0, min=0, description="records before the shift; 0: never")
    drift_features = params.List(
        params.Str(),
        default=["alcohol", "flavanoids", "proline"],
        description="the measurements that shift",
    )
    drift_scale = params.Float(default=1.3, min=0.0, description="their factor after the shift")

    def source(self) -> Iterator[Emit]:
        for index, item in enumerate(super().source()):
            if self.drift_after and index >= self.drift_after:
                shifted = {f: item.value[f] * self.drift_scale for f in self.drift_features}
                item = dataclasses.replace(item, value={**item.value, **shifted})
            yield item


class WineDrift(DriftDetector):
    """Watches the classifier's inputs and predictions for drift."""

    inp = Inlet("in", FEATURES_SCHEMA)
    outputs = Inlet("outputs", PREDICTION_SCHEMA)


class WineExplainer(ModelExplainer):
    """Explains sampled and unsure predictions; more of them while drift is reported."""

    inp = Inlet("in", FEATURES_SCHEMA)
    drift = ControlInlet("drift", DRIFT_REPORT)


class DriftAlertLogger(Streamlet):
    """Logs each drift alert as one line."""

    inp = Inlet("in", DRIFT_REPORT)

    def process(self, record: Record) -> None:
        report = record.value
        window = report["window"]
        verdict = f"DRIFT ({report['severity']})" if report["drifted"] else "drift cleared"
        self.context.logger.warning(
            "%s in the %s of %s:%s, window %d (%d records): %s",
            verdict,
            report["source"],
            report["model"] or "the model",
            report["model_version"],
            window["index"],
            window["records"],
            report["message"],
        )


class ExplanationLogger(Streamlet):
    """Logs every Nth explanation: the prediction and its strongest features."""

    inp = Inlet("in", EXPLANATION)
    every = params.Int(default=10, min=1, description="log one line per this many explanations")
    top = params.Int(default=3, min=1, description="features per line")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.count = 0

    def process(self, record: Record) -> None:
        self.count += 1
        if self.count % self.every:
            return
        value = record.value
        strongest = sorted(value["attributions"], key=lambda a: -abs(a["attribution"]))
        features = ", ".join(
            f"{a['feature']} {a['attribution']:+.3f}" for a in strongest[: self.top]
        )
        self.context.logger.info(
            "%s: class %d (p=%.2f) by %s:%s, %s (%s): %s",
            value["key"],
            value["target"],
            value["prediction"][value["target"]],
            value["model"],
            value["model_version"],
            value["method"].lower().replace("_", "-"),
            value["reason"].lower().replace("_", "-"),
            features,
        )
