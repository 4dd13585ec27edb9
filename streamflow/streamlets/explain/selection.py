"""Which records to explain, and how many a batch can afford.

Explaining costs far more than predicting (integrated gradients are tens of
forward and backward passes per record; KernelExplainer thousands of
predictions), so the streamlet explains a chosen few:

* ``PREDICATE``: every record matching the configured expression;
* ``LOW_CONFIDENCE``: every prediction whose top probability is below a bar;
* ``DRIFT``: while a drift detector says the inputs drifted, a (higher) share;
* ``SAMPLE``: otherwise a share of ordinary records.

Sampling is decided by a hash of where the record is (topic, partition,
offset), not by a random draw: a batch retried after a failure, or replayed
after a restart, picks the same records, and replicas agree.

Then a time budget per batch bounds the work. A running estimate of the
seconds one explanation takes says how many fit; the chosen records are kept
in priority order (predicate, low confidence, drift, sample) and, within a
priority, in hash order, which is a uniform sample. The rest are shed and
counted, so a slow explainer lowers the share explained instead of growing a
queue or the consumer lag.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from streamflow.api.streamlet import Record
from streamflow.streamlets.explain.predicate import Predicate

__all__ = ["REASONS", "Budget", "Chosen", "Selector", "position_hash"]

REASONS = ("PREDICATE", "LOW_CONFIDENCE", "DRIFT", "SAMPLE")  # in priority order


@dataclasses.dataclass(frozen=True, order=True)
class Chosen:
    priority: int
    draw: float
    index: int  # the record's position in its batch

    @property
    def reason(self) -> str:
        return REASONS[self.priority]


def position_hash(record: Record) -> float:
    """A uniform number in [0, 1) fixed by where the record is in Kafka."""
    where = f"{record.topic}/{record.partition}/{record.offset}".encode()
    return zlib.crc32(where) / 2**32


@dataclasses.dataclass
class Selector:
    sample_rate: float
    drift_rate: float
    low_confidence: float
    predicate: Predicate | None

    @property
    def needs_predictions(self) -> bool:
        """Whether choosing needs every record's prediction (not just the chosen ones')."""
        uses = self.predicate.names if self.predicate else set()
        return self.low_confidence > 0 or bool(uses & {"confidence", "predicted"})

    def choose(
        self,
        records: Sequence[Record],
        *,
        predictions: np.ndarray | None,
        drifted: bool,
    ) -> list[Chosen]:
        """The records worth explaining, most important first."""
        chosen = []
        for index, record in enumerate(records):
            draw = position_hash(record)
            priority = self._priority(record.value, draw, predictions, index, drifted)
            if priority is not None:
                chosen.append(Chosen(priority, draw, index))
        return sorted(chosen)

    def _priority(
        self,
        value: Mapping[str, Any],
        draw: float,
        predictions: np.ndarray | None,
        index: int,
        drifted: bool,
    ) -> int | None:
        confidence = predicted = None
        if predictions is not None:
            row = predictions[index]
            confidence, predicted = float(np.max(row)), int(np.argmax(row))
        if self.predicate is not None and self.predicate.matches(
            {**value, "confidence": confidence, "predicted": predicted}
        ):
            return 0
        if confidence is not None and confidence < self.low_confidence:
            return 1
        if drifted and draw < self.drift_rate:
            return 2
        if draw < self.sample_rate:
            return 3
        return None


class Budget:
    """Seconds per batch for explaining, and a running estimate of seconds per explanation."""

    def __init__(self, *, seconds: float, smoothing: float = 0.3) -> None:
        self.seconds = seconds
        self.smoothing = smoothing
        self.per_record: float | None = None  # unknown until the first explanation

    def affordable(self, wanted: int) -> int:
        """How many of ``wanted`` explanations fit the budget (at least one)."""
        if self.per_record is None or self.per_record <= 0:
            return wanted
        return max(1, min(wanted, int(self.seconds / self.per_record)))

    def spent(self, seconds: float, records: int) -> None:
        if records <= 0:
            return
        observed = seconds / records
        previous = self.per_record
        self.per_record = (
            observed if previous is None else previous + self.smoothing * (observed - previous)
        )
