"""The reviews example: raw review text in, a sentiment label out.

The model (``train.py``) takes a string tensor named ``review`` and tokenises
it itself, with a ``TextVectorization`` layer inside the model, so the stream
carries the text as written. The blueprint's tensor mapping feeds the
``review`` field to it as a string tensor and writes its ``sentiment`` output
twice: the probabilities, and the argmax as a label ("negative" or
"positive"). These classes only bind the generic streamlets to the schemas.
"""

from __future__ import annotations

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet, params
from streamflow.streamlets.io import Generator
from streamflow.streamlets.serving import ModelServing

REVIEW_SCHEMA = "examples.reviews.Review"
SENTIMENT_SCHEMA = "examples.reviews.ReviewSentiment"
LABELS = ("negative", "positive")  # the order of the model's outputs and of the labels


class ReviewFeed(Generator):
    """Replays the generated reviews (written by train.py) at a steady rate."""

    out = Outlet("out", REVIEW_SCHEMA)


class SentimentClassifier(ModelServing):
    """Labels reviews with whichever model the `model` control inlet says."""

    inp = Inlet("in", REVIEW_SCHEMA)
    out = Outlet("out", SENTIMENT_SCHEMA)


class AccuracyLogger(Streamlet):
    """Logs every Nth verdict, with the running accuracy of each model version."""

    inp = Inlet("in", SENTIMENT_SCHEMA)
    every = params.Int(default=100, min=1, description="log one line per this many verdicts")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.seen: dict[str, tuple[int, int]] = {}
        self.count = 0

    def process(self, record: Record) -> None:
        value = record.value
        tag = f"{value['model']}:{value['model_version']}"
        truth = LABELS[value["label"]] if value["label"] is not None else None
        right, total = self.seen.get(tag, (0, 0))
        self.seen[tag] = (right + int(truth == value["predicted"]), total + 1)
        self.count += 1
        if self.count % self.every:
            return
        summary = ", ".join(f"{t} {r / n:.1%} of {n}" for t, (r, n) in sorted(self.seen.items()))
        self.context.logger.info(
            "%s %r -> %s (p=%.2f) by %s, %.1f ms; accuracy: %s",
            value["id"],
            value["review"],
            value["predicted"],
            max(value["scores"]),
            tag,
            value["latency_ms"],
            summary,
        )
