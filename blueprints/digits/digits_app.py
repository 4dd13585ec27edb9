"""The digits example: 8x8 images in, digit predictions out, through a named-tensor model.

The model is the small CNN ``train.py`` trains on scikit-learn's digits. Its
input is the tensor ``image`` [8, 8, 1] and its output ``probabilities`` [10];
the blueprints' tensor mapping says which record field feeds the one and which
fields the other fills (the scores, the argmax, a labelled top 3), so these
classes only bind the generic streamlets' ports to the example's schemas.

Two input forms, one prediction: ``DigitImage`` carries the pixels as nested
8x8x1 lists (readable, what ``classifier.yaml`` uses) and ``DigitImageBytes``
as the raw little-endian float32 tensor (compact, ``classifier-bytes.yaml``).
"""

from __future__ import annotations

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet, params
from streamflow.streamlets.io import Generator
from streamflow.streamlets.serving import ModelServing

IMAGE_SCHEMA = "examples.digits.DigitImage"
IMAGE_BYTES_SCHEMA = "examples.digits.DigitImageBytes"
PREDICTION_SCHEMA = "examples.digits.DigitPrediction"


class DigitFeed(Generator):
    """Replays the digits (written by train.py) at a steady rate, pixels as nested lists."""

    out = Outlet("out", IMAGE_SCHEMA)


class DigitBytesFeed(Generator):
    """Replays the digits with each image as a raw float32 tensor."""

    out = Outlet("out", IMAGE_BYTES_SCHEMA)


class DigitClassifier(ModelServing):
    """Classifies images with whichever model the `model` control inlet says."""

    inp = Inlet("in", IMAGE_SCHEMA)
    out = Outlet("out", PREDICTION_SCHEMA)


class DigitBytesClassifier(ModelServing):
    """Classifies raw-tensor images with whichever model the `model` control inlet says."""

    inp = Inlet("in", IMAGE_BYTES_SCHEMA)
    out = Outlet("out", PREDICTION_SCHEMA)


class AccuracyLogger(Streamlet):
    """Logs every Nth prediction, with the running accuracy of each model version."""

    inp = Inlet("in", PREDICTION_SCHEMA)
    every = params.Int(default=100, min=1, description="log one line per this many predictions")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.seen: dict[str, tuple[int, int]] = {}
        self.count = 0

    def process(self, record: Record) -> None:
        value = record.value
        tag = f"{value['model']}:{value['model_version']}"
        right, total = self.seen.get(tag, (0, 0))
        self.seen[tag] = (right + int(value["label"] == value["predicted"]), total + 1)
        self.count += 1
        if self.count % self.every:
            return
        summary = ", ".join(f"{t} {r / n:.1%} of {n}" for t, (r, n) in sorted(self.seen.items()))
        top = " ".join(f"{c['label']}:{c['score']:.2f}" for c in value["top"])
        self.context.logger.info(
            "%s (a %s) -> %d [%s] by %s, %.1f ms; accuracy: %s",
            value["id"],
            value["label"],
            value["predicted"],
            top,
            tag,
            value["latency_ms"],
            summary,
        )
