"""The wine classifier with a rollout judged by evidence: delayed labels, then a verdict.

``rollout.yaml`` serves the wine classifier of ``classifier.yaml`` and, beside it, the
two streamlets that judge a candidate version while it rolls out:

* ``evidence`` (:class:`~streamflow.streamlets.rollout.RolloutEvidence`) joins the true
  cultivars, which arrive on ``wine-labels`` some records after their predictions, to
  the predictions and the candidate's shadow outputs by key, in durable state, and
  writes each version's evidence per window;
* ``controller`` (:class:`~streamflow.streamlets.rollout.RolloutController`) sums it
  over each step of the rollout policy and moves the candidate on, promotes it or rolls
  it back, with records on the model topic, writing each decision to
  ``wine-rollout-decisions``.

``LabelledWineFeed`` is the example's source of both: each wine under a key of its own,
its cultivar held back from the features, and told ``label_lag`` wines later on the
labels outlet, as a lab's verdict comes after the prediction.
"""

from __future__ import annotations

import collections
import dataclasses
import time
import zlib
from collections.abc import Iterator

from classifier_app import PREDICTION_SCHEMA, WineFeed

from streamflow import Emit, Inlet, Outlet, Record, Streamlet, params
from streamflow.streamlets.rollout import RolloutEvidence

LABEL_SCHEMA = "examples.wine.WineLabel"
DECISION = "streamflow.ml.RolloutDecision"


class LabelledWineFeed(WineFeed):
    """Replays the wine data set, one key per wine served; its labels come later."""

    labels = Outlet("labels", LABEL_SCHEMA, description="each wine's true cultivar, later")

    label_lag = params.Int(
        default=50, min=0, description="wines between a prediction's input and its label"
    )
    label_share = params.Float(
        default=0.8,
        min=0.0,
        max=1.0,
        description="the share of the wines whose label is ever known",
    )

    def source(self) -> Iterator[Emit]:
        waiting: collections.deque[tuple[str, int]] = collections.deque()
        for n, item in enumerate(super().source()):
            key = f"{item.value['id']}-{n}"
            label = item.value.get("label")
            yield dataclasses.replace(item, value={**item.value, "id": key, "label": None}, key=key)
            if label is not None and zlib.crc32(key.encode()) % 1000 < self.label_share * 1000:
                waiting.append((key, label))
            while len(waiting) > self.label_lag:
                told, cultivar = waiting.popleft()
                known = {"id": told, "label": cultivar, "known_at": int(time.time() * 1000)}
                yield self.labels(known, key=told)


class WineEvidence(RolloutEvidence):
    """Each version's evidence per window: predictions, shadows and the delayed labels."""

    predictions = Inlet("predictions", PREDICTION_SCHEMA)
    shadow = Inlet("shadow", PREDICTION_SCHEMA)
    labels = Inlet("labels", LABEL_SCHEMA)


class DecisionLogger(Streamlet):
    """Logs each rollout decision as one line."""

    inp = Inlet("in", DECISION)

    def process(self, record: Record) -> None:
        d = record.value
        low, high = d["interval_low"], d["interval_high"]
        interval = (
            f", candidate - stable accuracy in [{low:+.1%}, {high:+.1%}]" if low is not None else ""
        )
        self.context.logger.warning(
            "rollout of %s:%d (stable %d), step %d of %d (%s %g%%): %s: %s "
            "(candidate %d records, %d labelled%s)",
            d["model"],
            d["candidate_version"],
            d["stable_version"],
            d["step"],
            d["steps"],
            d["mode"],
            d["share"],
            d["verdict"],
            d["reason"],
            d["candidate"]["records"],
            d["candidate"]["labelled"],
            interval,
        )
