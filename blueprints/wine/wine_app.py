"""The wine-quality example: a source of wine samples, a scorer, and a logger.

The samples follow a seeded, mean-reverting random walk around the means of
the UCI red-wine data set, so a run looks like a plausible stream of
measurements and is the same on every run with the same seed. The scorer is a
linear heuristic (the ordinary least-squares fit on that data set, rounded),
standing in for the TensorFlow model that later issues serve in its place.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

from streamflow import Context, Inlet, Outlet, Record, Streamlet, params

SAMPLE = "examples.wine.WineSample"
SCORE = "examples.wine.WineScore"

# (mean, standard deviation) of each feature in the UCI red-wine data set.
FEATURES: Mapping[str, tuple[float, float]] = {
    "fixed_acidity": (8.32, 1.74),
    "volatile_acidity": (0.528, 0.179),
    "citric_acid": (0.271, 0.195),
    "residual_sugar": (2.54, 1.41),
    "chlorides": (0.0875, 0.047),
    "free_sulfur_dioxide": (15.9, 10.5),
    "total_sulfur_dioxide": (46.5, 32.9),
    "density": (0.9967, 0.0019),
    "pH": (3.31, 0.154),
    "sulphates": (0.658, 0.170),
    "alcohol": (10.42, 1.07),
}

# Least-squares weights of quality on the features (red wine), and the intercept.
WEIGHTS: Mapping[str, float] = {
    "fixed_acidity": 0.025,
    "volatile_acidity": -1.084,
    "citric_acid": -0.183,
    "residual_sugar": 0.016,
    "chlorides": -1.874,
    "free_sulfur_dioxide": 0.0044,
    "total_sulfur_dioxide": -0.0033,
    "density": -17.88,
    "pH": -0.414,
    "sulphates": 0.916,
    "alcohol": 0.276,
}
INTERCEPT = 21.97


def heuristic_quality(sample: Mapping[str, Any]) -> float:
    """The linear estimate of a sample's quality on the tasters' 0-10 scale."""
    estimate = INTERCEPT + sum(w * float(sample[name]) for name, w in WEIGHTS.items())
    return min(10.0, max(0.0, estimate))


def band_of(score: float) -> str:
    if score < 5.0:
        return "LOW"
    return "MEDIUM" if score < 6.5 else "HIGH"


class WineSampler:
    """A mean-reverting random walk over the features: each step pulls back to the mean."""

    def __init__(self, *, seed: int, pull: float = 0.2) -> None:
        self._random = random.Random(seed)
        self._pull = pull
        self._state = {name: mean for name, (mean, _) in FEATURES.items()}

    def next(self) -> dict[str, float]:
        for name, (mean, sd) in FEATURES.items():
            value = self._state[name]
            value += self._pull * (mean - value) + self._random.gauss(0.0, sd * 0.5)
            self._state[name] = max(value, mean * 0.05)  # measurements stay positive
        return {name: round(value, 5) for name, value in self._state.items()}

    def grade(self, sample: Mapping[str, float]) -> int:
        """A plausible tasters' grade: the estimate plus their disagreement."""
        noisy = heuristic_quality(sample) + self._random.gauss(0.0, 0.6)
        return int(min(8, max(3, round(noisy))))


class WineSource(Streamlet):
    """Generates WineSample records at a steady rate from a seeded random walk."""

    out = Outlet(schema=SAMPLE, key=lambda record: str(record["id"]))

    rate = params.Float(default=50.0, min=0.0, description="records per second; 0 = unthrottled")
    count = params.Int(default=0, min=0, description="records to generate; 0 = forever")
    seed = params.Int(default=42, description="seed of the random walk")

    def setup(self, context: Context) -> None:
        self.context = context

    async def source(self) -> AsyncIterator[dict[str, Any]]:
        sampler = WineSampler(seed=self.seed + self.context.replica)
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        produced = 0
        while self.count == 0 or produced < self.count:
            features = sampler.next()
            yield {
                "id": f"wine-{self.context.replica}-{produced:08d}",
                **features,
                "quality": sampler.grade(features),
            }
            produced += 1
            await asyncio.sleep(interval)


class QualityScorer(Streamlet):
    """Scores each WineSample with a linear heuristic and labels it good or poor."""

    inlet = Inlet("in", schema=SAMPLE)
    out = Outlet(schema=SCORE)

    threshold = params.Float(
        default=6.0, min=0.0, max=10.0, description="score from which a wine is labelled good"
    )

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        return [self._score(record.value) for record in records]

    def _score(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        score = round(heuristic_quality(sample), 4)
        return {
            "id": sample["id"],
            "score": score,
            "label": "good" if score >= self.threshold else "poor",
            "band": band_of(score),
            "model": None,
        }


class ScoreLogger(Streamlet):
    """Logs every n-th WineScore, so a run shows that scores are flowing."""

    inlet = Inlet("in", schema=SCORE)

    every = params.Int(default=100, min=1, description="log one score in this many")

    _seen = 0  # scores seen by this replica; setup() starts it afresh

    def setup(self, context: Context) -> None:
        self.context = context
        self._seen = 0

    def process(self, record: Record) -> None:
        self._seen += 1
        if self._seen % self.every == 0:
            score = record.value
            self.context.logger.info(
                "%s: score %.2f (%s, %s) after %d scores",
                score["id"],
                score["score"],
                score["label"],
                score["band"],
                self._seen,
            )
