"""The wine example's own logic: the sampler, the heuristic, and the scorer."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from streamflow import Context, Record
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.blueprint.bp_helpers import EXAMPLE

sys.path.insert(0, str(EXAMPLE.parent))
wine_app = pytest.importorskip("wine_app")


def test_the_sampler_is_deterministic_and_plausible() -> None:
    first = [wine_app.WineSampler(seed=7).next() for _ in range(2)]
    assert first[0] == first[1]
    sampler = wine_app.WineSampler(seed=7)
    samples = [sampler.next() for _ in range(500)]
    assert all(min(s.values()) > 0 for s in samples)
    mean_alcohol = sum(s["alcohol"] for s in samples) / len(samples)
    assert 9.0 < mean_alcohol < 12.0


def test_the_heuristic_scores_an_average_wine_as_average() -> None:
    average = {name: mean for name, (mean, _) in wine_app.FEATURES.items()}
    assert 5.0 < wine_app.heuristic_quality(average) < 6.5
    assert wine_app.band_of(4.0) == "LOW"
    assert wine_app.band_of(7.0) == "HIGH"


def test_the_scorer_scores_a_batch_in_order() -> None:
    scorer = wine_app.QualityScorer({"threshold": 5.0})
    sampler = wine_app.WineSampler(seed=1)
    records = [Record({"id": f"w{i}", **sampler.next()}) for i in range(3)]
    scores = scorer.process_batch(records)
    assert [s["id"] for s in scores] == ["w0", "w1", "w2"]
    assert all(s["label"] == ("good" if s["score"] >= 5.0 else "poor") for s in scores)
    assert {s["model"] for s in scores} == {None}


def test_source_and_scorer_records_match_their_schemas() -> None:
    store = SchemaStore([EXAMPLE.parents[2] / "schemas"])
    samples_codec = SingleObjectCodec(store.get(wine_app.SAMPLE))
    scores_codec = SingleObjectCodec(store.get(wine_app.SCORE))
    source = wine_app.WineSource({"count": 3, "rate": 0})
    source.setup(Context(replica=1))

    async def collect() -> list[dict[str, Any]]:
        return [record async for record in source.source()]

    samples = asyncio.run(collect())
    assert [s["id"] for s in samples] == ["wine-1-00000000", "wine-1-00000001", "wine-1-00000002"]
    decoded = [samples_codec.decode(samples_codec.encode(s)) for s in samples]
    assert decoded == samples
    scores = wine_app.QualityScorer().process_batch([Record(s) for s in decoded])
    assert [scores_codec.decode(scores_codec.encode(s)) for s in scores] == scores
