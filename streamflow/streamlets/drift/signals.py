"""Streaming change detectors (river's ADWIN and Page-Hinkley) on a model's scalar signals.

Windowed tests compare distributions every W records; these react to a
change in the *mean* of one number per record as soon as it is significant,
without waiting for a window, and cost O(1) (amortised) per record:

* ``confidence``: the top class probability of each prediction;
* ``class=N``: 1 when the prediction is class N, else 0 (the class mix);
* ``error_rate``: 1 when a prediction disagrees with its label, else 0.

ADWIN keeps an adaptive window and cuts it when two sub-windows' means
differ by more than a Hoeffding-style bound at confidence ``delta``;
Page-Hinkley accumulates deviations from the running mean and fires past a
threshold. Both are river's implementations. A report lists, per signal and
detector, the signal's mean since the last report and whether the detector
fired in between.

Labels arrive on their own inlet, later than the predictions, and are joined
to them by record key in two bounded maps (so a label that never comes costs
a slot, not memory without limit).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from river import drift as river_drift

__all__ = ["LabelJoin", "OutputSignals", "SignalMonitor"]


@dataclass
class _Tracked:
    detectors: dict[str, Any]
    total: float = 0.0
    count: int = 0
    fired: set[str] = field(default_factory=set)


class SignalMonitor:
    """ADWIN and Page-Hinkley per named signal; their state since the last report."""

    def __init__(
        self, *, adwin_delta: float, ph_threshold: float, ph_delta: float, grace: int = 30
    ) -> None:
        self.adwin_delta = adwin_delta
        self.ph_threshold = ph_threshold
        self.ph_delta = ph_delta
        self.grace = grace
        self._signals: dict[str, _Tracked] = {}

    def update(self, signal: str, value: float) -> None:
        tracked = self._signals.get(signal)
        if tracked is None:
            tracked = self._signals[signal] = _Tracked(self._detectors(signal))
        tracked.total += value
        tracked.count += 1
        for name, detector in tracked.detectors.items():
            detector.update(value)
            if detector.drift_detected:
                tracked.fired.add(name)

    def report(self) -> list[dict[str, Any]]:
        """One entry per (signal, detector) seen since the last report; resets the tallies."""
        out = []
        for signal, tracked in sorted(self._signals.items()):
            if not tracked.count:
                continue
            mean = tracked.total / tracked.count
            out += [
                {"signal": signal, "detector": name, "mean": mean, "drifted": name in tracked.fired}
                for name in tracked.detectors
            ]
            tracked.total, tracked.count, tracked.fired = 0.0, 0, set()
        return out

    def _detectors(self, signal: str) -> dict[str, Any]:
        detectors: dict[str, Any] = {
            "ADWIN": river_drift.ADWIN(  # type: ignore[no-untyped-call]
                delta=self.adwin_delta, grace_period=self.grace
            )
        }
        if not signal.startswith("class="):  # one mean-shift detector per class is plenty
            detectors["PAGE_HINKLEY"] = river_drift.PageHinkley(
                min_instances=self.grace, delta=self.ph_delta, threshold=self.ph_threshold
            )
        return detectors


class LabelJoin:
    """Matches predictions with labels that arrive separately, by key, in bounded memory."""

    def __init__(self, *, capacity: int) -> None:
        self.capacity = capacity
        self._predictions: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._labels: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.evicted = 0

    def prediction(self, key: str | None, predicted: int) -> int | None:
        """The label for this prediction, if it came first; else remember the prediction."""
        if key is None:
            return None
        label = self._labels.pop(key, None)
        if label is None:
            self._remember(self._predictions, key, predicted)
        return label

    def label(self, key: str | None, label: int) -> int | None:
        """The prediction this label belongs to, if it came first; else remember the label."""
        if key is None:
            return None
        predicted = self._predictions.pop(key, None)
        if predicted is None:
            self._remember(self._labels, key, label)
        return predicted

    def _remember(self, pending: collections.OrderedDict[str, int], key: str, value: int) -> None:
        pending[key] = value
        pending.move_to_end(key)
        while len(pending) > self.capacity:
            pending.popitem(last=False)
            self.evicted += 1


class OutputSignals:
    """The signals of a model's outputs: confidence, class mix and (with labels) error rate."""

    def __init__(self, monitor: SignalMonitor, join: LabelJoin) -> None:
        self.monitor = monitor
        self.join = join
        self._classes: set[int] = set()

    def output(
        self,
        key: str | None,
        *,
        probabilities: list[float] | None,
        predicted: int | None,
        label: int | None,
    ) -> None:
        if probabilities:
            self.monitor.update("confidence", float(max(probabilities)))
        if predicted is None:
            return
        self._classes.add(predicted)
        for seen in self._classes:
            self.monitor.update(f"class={seen}", 1.0 if seen == predicted else 0.0)
        if label is None:
            label = self.join.prediction(key, predicted)
        if label is not None:
            self.monitor.update("error_rate", float(int(label) != predicted))

    def label(self, key: str | None, label: int | None) -> None:
        if label is None:
            return
        predicted = self.join.label(key, int(label))
        if predicted is not None:
            self.monitor.update("error_rate", float(int(label) != predicted))
