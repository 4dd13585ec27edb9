"""The wine-classifier example: wine measurements in, cultivar predictions out.

The model is a small Keras MLP trained by ``train.py`` on scikit-learn's wine
data set; ``ModelPublisher`` pushes version 1 as the application starts, and
``streamflow model push`` switches versions (or to a model server) live.
The ports of the built-in generic streamlets are bound to this example's
schemas by the two-line subclasses below.
"""

from __future__ import annotations

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet, params
from streamflow.streamlets.io import Generator
from streamflow.streamlets.serving import ModelServing

FEATURES_SCHEMA = "examples.wine.WineFeatures"
PREDICTION_SCHEMA = "examples.wine.WinePrediction"


class WineFeed(Generator):
    """Replays the wine data set (written by train.py) at a steady rate."""

    out = Outlet("out", FEATURES_SCHEMA)


class WineClassifier(ModelServing):
    """Classifies wines with whichever model the `model` control inlet says."""

    inp = Inlet("in", FEATURES_SCHEMA)
    out = Outlet("out", PREDICTION_SCHEMA)


class AccuracyLogger(Streamlet):
    """Logs every Nth prediction, with the running accuracy of each model version."""

    inp = Inlet("in", PREDICTION_SCHEMA)
    every = params.Int(default=50, min=1, description="log one line per this many predictions")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.seen: dict[str, list[int]] = {}
        self.count = 0

    def process(self, record: Record) -> None:
        value = record.value
        tag = f"{value['model']}:{value['model_version']}"
        right, total = self.seen.setdefault(tag, [0, 0])
        correct = value["label"] is not None and value["label"] == value["predicted"]
        self.seen[tag] = [right + int(correct), total + 1]
        self.count += 1
        if self.count % self.every == 0:
            summary = ", ".join(
                f"{t} {r / n:.1%} of {n}" for t, (r, n) in sorted(self.seen.items())
            )
            self.context.logger.info(
                "wine %s -> class %d (p=%.2f) by %s, %.1f ms; accuracy: %s",
                value["id"],
                value["predicted"],
                max(value["probabilities"]),
                tag,
                value["latency_ms"],
                summary,
            )
