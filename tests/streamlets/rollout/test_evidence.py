"""Rollout evidence: predictions per version, and delayed labels joined by key in state.

The join must give what a batch join over the same records gives, whatever order the
labels come in, duplicated or missing, and across a restart from the changelog.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from streamflow import Inlet
from streamflow.streamlets.rollout import RolloutEvidence
from streamflow.streamlets.rollout.tally import LATENCY_BOUNDS, js_distance, percentile
from streamflow.testkit import StreamletHarness

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas" / "examples" / "wine"
T0 = 1_800_000_000_000
WINDOW_MS, HORIZON_MS = 10_000, 60_000


class WineEvidence(RolloutEvidence):
    predictions = Inlet("predictions", "examples.wine.WinePrediction")
    labels = Inlet("labels", "examples.wine.WineLabel")
    shadow = Inlet("shadow", "examples.wine.WinePrediction")


CONFIG = {
    "model": "wine",
    "window": "10s",
    "horizon": "60s",
    "grace": "30s",
    "time_field": "known_at",
}


def _harness() -> StreamletHarness:
    return StreamletHarness(WineEvidence, config=CONFIG, schema_paths=[SCHEMAS])


def _prediction(key: str, version: int, predicted: int, latency: float = 1.0) -> dict[str, Any]:
    return {
        "id": key,
        "predicted": predicted,
        "probabilities": [0.2, 0.3, 0.5],
        "model": "wine",
        "model_version": version,
        "latency_ms": latency,
        "label": None,
    }


def _label(key: str, label: int, at: int) -> dict[str, Any]:
    return {"id": key, "label": label, "known_at": at}


def _totals(evidence: list[dict[str, Any]]) -> dict[str, Any]:
    per: dict[tuple[int, bool], Counter[str]] = {}
    shared: Counter[str] = Counter()
    for record in evidence:
        for v in record["versions"]:
            mine = per.setdefault((v["version"], v["shadow"]), Counter())
            for name in ("records", "failures", "labelled", "correct", "unlabelled"):
                mine[name] += v[name]
        for name in ("compared", "agreed", "unmatched_labels", "duplicate_labels"):
            shared[name] += record[name]
    return {"versions": per, **shared}


def test_delayed_labels_give_the_exact_batch_accuracy() -> None:
    """Labels up to the horizon late, out of order, duplicated or never: the windows add up
    to the batch join; labels past the horizon are unmatched, predictions never labelled are
    unlabelled, and a restart from the changelog halfway changes nothing."""
    rng = random.Random(7)
    n = 1200
    keys = [f"w{i}" for i in range(n)]
    truth = {k: rng.randrange(3) for k in keys}
    version = {k: 2 if rng.random() < 0.3 else 1 for k in keys}
    predicted = {
        k: truth[k] if rng.random() < (0.9 if version[k] == 1 else 0.7) else (truth[k] + 1) % 3
        for k in keys
    }
    born = {k: T0 + i * 100 for i, k in enumerate(keys)}  # 10 per second
    labels: list[tuple[int, str, int]] = []  # (when it is read, key, its event time)
    for k in keys:
        fate = rng.random()
        if fate < 0.1:
            continue  # never labelled
        delay = rng.randrange(0, HORIZON_MS) if fate < 0.9 else HORIZON_MS + 1 + rng.randrange(5000)
        labels.append((born[k] + delay, k, born[k] + delay))
        if rng.random() < 0.05:  # a duplicate, read a little later
            labels.append((born[k] + delay + rng.randrange(2000), k, born[k] + delay))
    strays = [f"stray{i}" for i in range(20)]  # labels of records never predicted
    labels += [(T0 + 1000 * i, k, T0 + 1000 * i) for i, k in enumerate(strays)]
    # out of order: each label is read up to 20 s off its time (the grace is 30 s)
    labels.sort(key=lambda item: item[0] + rng.randrange(-20_000, 20_000))

    # the batch join: each prediction's first label within the horizon
    labelled, correct = Counter(), Counter()
    seen: set[str] = set()
    for _, k, at in labels:
        if k in seen or k not in born or abs(at - born[k]) > HORIZON_MS:
            continue
        seen.add(k)
        labelled[version[k]] += 1
        correct[version[k]] += predicted[k] == truth[k]

    events = sorted(
        [(born[k], "p", k, born[k]) for k in keys] + [(read, "l", k, at) for read, k, at in labels],
        key=lambda e: e[0],
    )
    evidence: list[dict[str, Any]] = []
    h = _harness()
    half = len(events) // 2
    for index, (read, kind, k, at) in enumerate(events):
        if index == half:  # a replica restarted from the changelog halfway
            h.run()
            evidence += h.values("evidence")
            h.clear()
            h.teardown()
            h = h.restarted()
        if kind == "p":
            h.feed(
                "predictions",
                _prediction(k, version[k], predicted[k]),
                key=k,
                timestamp_ms=read,
                headers={"streamflow-model": f"wine:{version[k]}"},
            )
        else:
            h.feed("labels", _label(k, truth.get(k, 0), at), key=k, timestamp_ms=read)
    last = events[-1][0] + HORIZON_MS + 60_000  # time passes on both: every window closes
    h.feed("predictions", _prediction("tick", 1, 0), key="tick", timestamp_ms=last)
    h.feed("labels", _label("tock", 0, last), key="tock", timestamp_ms=last)
    h.run()
    evidence += h.values("evidence")
    h.teardown()

    totals = _totals(evidence)
    for v in (1, 2):
        mine = totals["versions"][(v, False)]
        assert (mine["labelled"], mine["correct"]) == (labelled[v], correct[v]), v
        assert mine["records"] == sum(1 for k in keys if version[k] == v)
        assert mine["unlabelled"] == sum(1 for k in keys if version[k] == v and k not in seen)
    duplicates = len(labels) - len({(k, at) for _, k, at in labels})
    unmatched = len({k for _, k, at in labels if k not in seen})
    assert totals["duplicate_labels"] == duplicates
    assert totals["unmatched_labels"] == unmatched
    # windows are whole 10 s spans of event time, each written once
    assert all(
        (e["end_time"] - e["start_time"]).total_seconds() * 1000 == WINDOW_MS for e in evidence
    )
    places = [(e["inlet"], e["partition"], e["window"]) for e in evidence]
    assert len(places) == len(set(places))


def test_shadow_agreement_fallbacks_and_latency() -> None:
    """A shadowed candidate's outputs meet the stable ones by key (agreement); a record the
    candidate failed counts against it; latencies come back as buckets and percentiles."""
    h = _harness()
    for i in range(100):
        key = f"k{i}"
        h.feed(
            "predictions",
            _prediction(key, 1, i % 3, latency=2.0),
            key=key,
            timestamp_ms=T0 + i,
            headers={"streamflow-model": "wine:1"}
            | ({"streamflow-fallback": "wine:2"} if i < 4 else {}),
        )
        if i >= 4:
            h.feed(
                "shadow",
                _prediction(key, 2, i % 3 if i % 10 else (i + 1) % 3, latency=30.0),
                key=key,
                timestamp_ms=T0 + i,
                headers={"streamflow-model": "wine:2"},
            )
    for inlet in ("predictions", "shadow"):
        h.feed(inlet, _prediction("tick", 1, 0), key="tick", timestamp_ms=T0 + 20_000)
    h.run()
    evidence = h.values("evidence")
    totals = _totals(evidence)
    assert totals["versions"][(2, True)]["records"] == 96
    assert totals["versions"][(2, False)]["failures"] == 4
    assert totals["compared"] == 96
    assert totals["agreed"] == 96 - sum(1 for i in range(4, 100) if i % 10 == 0)
    stable = next(
        v for e in evidence for v in e["versions"] if (v["version"], v["shadow"]) == (1, False)
    )
    assert 2.0 <= stable["latency_p99_ms"] <= 2.0 * 1.25
    shadow = next(v for e in evidence for v in e["versions"] if v["shadow"])
    assert 30.0 <= shadow["latency_p99_ms"] <= 30.0 * 1.25
    h.teardown()


def test_tally_arithmetic() -> None:
    assert percentile([], 0.99) is None
    buckets = [0] * (len(LATENCY_BOUNDS) + 1)
    buckets[3] = 99
    buckets[10] = 1
    assert percentile(buckets, 0.5) == LATENCY_BOUNDS[3]
    assert percentile(buckets, 0.999) == LATENCY_BOUNDS[10]
    assert js_distance({"0": 10}, {"0": 5}) == 0.0
    assert js_distance({"0": 10}, {"1": 5}) == 1.0
    assert js_distance({}, {"1": 5}) is None
    # summed in one order whatever the dicts' (CI saw the last digit move between runs)
    first = {str(c): 10 + 7 * c for c in range(40)}
    second = {str(c): 50 - c for c in range(40)}
    expected = js_distance(first, second)
    assert js_distance(dict(reversed(first.items())), dict(reversed(second.items()))) == expected


def test_label_times_far_off_cost_nothing_and_impossible_ones_are_dead_letters() -> None:
    """An adversary's labels: one known in 1970 is unmatched at once (nothing it could meet
    is kept), one known after it was written or before the epoch is refused alone, saying
    why; none moves the clock, so the rest are judged as ever (the review found a label
    ten years ahead froze its partition's clock, and 3e7 empty scans before that)."""
    h = _harness()
    h.feed("labels", _label("ancient", 1, 1), key="ancient", timestamp_ms=T0)
    h.feed("labels", _label("sooner", 1, T0), key="sooner", timestamp_ms=T0)
    h.feed("labels", _label("late", 2, -5), key="late", timestamp_ms=T0)
    ten_years = T0 + 10 * 365 * 86_400_000
    h.feed("labels", _label("future", 1, ten_years), key="future", timestamp_ms=T0)
    h.run()
    assert [(d.key, d.error.split(":")[0]) for d in h.dead_letters] == [
        ("late", "ValueError"),
        ("future", "ValueError"),
    ]
    assert "not a time in ms: -5" in h.dead_letters[0].error
    assert "is later than the record itself" in h.dead_letters[1].error
    after = T0 + HORIZON_MS + 30_000 + 2 * WINDOW_MS  # past sooner's horizon and grace
    h.feed("labels", _label("after", 1, after), key="after", timestamp_ms=after)
    h.run()
    assert _totals(h.values("evidence"))["unmatched_labels"] == 2  # ancient, then sooner
    h.teardown()


def test_every_model_seen_gets_evidence_of_its_own() -> None:
    """With no model named, two models' predictions in one window are two records (the
    review saw wine:1 and beer:1 counted as one model's version 1)."""
    h = StreamletHarness(WineEvidence, config={**CONFIG, "model": ""}, schema_paths=[SCHEMAS])
    for name in ("wine", "beer"):
        for i in range(10):
            key = f"{name}-{i}"
            h.feed(
                "predictions",
                _prediction(key, 1, i % 3) | {"model": name},
                key=key,
                timestamp_ms=T0 + i,
                headers={"streamflow-model": f"{name}:1"},
            )
    h.feed("predictions", _prediction("tick", 1, 0), key="tick", timestamp_ms=T0 + 20_000)
    h.run()
    evidence = [e for e in h.values("evidence") if e["window"] == T0 // WINDOW_MS]
    assert sorted((e["model"], [v["records"] for v in e["versions"]]) for e in evidence) == [
        ("beer", [10]),
        ("wine", [10]),
    ]
    h.teardown()
