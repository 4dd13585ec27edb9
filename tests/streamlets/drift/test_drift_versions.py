"""Every report names the version that made its records, however far the detector lags."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from streamflow.streamlets.drift import versions, windows
from tests.streamlets.drift import drift_support as d


def _descriptor(version: int) -> dict[str, Any]:
    return {
        "name": "points",
        "version": version,
        "kind": "KERAS",
        "data": b"unused",
        "location": None,
        "sha256": None,
        "parameters": {},
        "description": "",
        "created_at": dt.datetime.now(dt.UTC),
    }


def _prediction(index: int, version: int) -> dict[str, Any]:
    predicted = index % 3
    probabilities = [0.1, 0.1, 0.1]
    probabilities[predicted] = 0.8
    return {
        "probabilities": probabilities,
        "predicted": predicted,
        "model": "points",
        "model_version": version,
    }


def _covered(report: dict[str, Any], topic: str) -> list[int]:
    """The offsets a report's window covers on ``topic`` (one partition in the harness)."""
    spans = [o for o in report["window"]["offsets"] if o["topic"] == topic]
    return [i for span in spans for i in range(span["first"], span["last"] + 1)]


def test_a_lagging_detector_labels_each_window_with_the_version_of_its_own_records() -> None:
    """v1 predictions, then the v2 descriptor, then v1 predictions the detector was held back
    on, then v2 ones: no window is labelled with a version that made none of its records."""
    h = d.harness(d.FullDrift, window=100, reference_size=100, numeric=["x", "y"], categorical=[])
    d.settle(h)
    h.control("model", _descriptor(1))
    made_by: list[int] = []  # the version of record i, the same for its input and its prediction
    points = d.points(670, seed=3)

    def send(count: int, version: int, *, inputs_first: bool) -> None:
        start = len(made_by)
        chunk = range(start, start + count)
        made_by.extend([version] * count)
        keys = [f"p{i}" for i in chunk]
        outputs = [_prediction(i, version) for i in chunk]
        inputs = points[start : start + count]
        for inlet, values in (("in", inputs), ("outputs", outputs))[:: 1 if inputs_first else -1]:
            h.feed(inlet, values, keys=keys)

    send(250, 1, inputs_first=True)  # inputs wait for their predictions' versions
    h.run()
    h.control("model", _descriptor(2))  # the detector learns of v2 ...
    send(120, 1, inputs_first=False)  # ... before it reads these v1 records (it lags)
    send(300, 2, inputs_first=True)
    h.run()

    for source, topic in (("inputs", "in"), ("outputs", "outputs")):
        reports = d.reports(h, source)
        assert [r["window"]["index"] for r in reports] == list(range(6)), source
        # the first 100 records are the reference; 270 v1 records are cut 100, 100, 70
        assert [(r["model_version"], r["window"]["records"]) for r in reports] == [
            (1, 100),
            (1, 100),
            (1, 70),
            (2, 100),
            (2, 100),
            (2, 100),
        ], source
        covered: list[int] = []
        for report in reports:
            offsets = _covered(report, topic)
            assert {made_by[i] for i in offsets} == {report["model_version"]}, (source, report)
            assert report["model_version_from"] == "predictions"
            assert report["model"] == "points"
            covered += offsets
        assert sorted(covered) == list(range(100, 670)), source  # each record in one window
    assert not h.dead_letters


def test_inputs_without_a_prediction_take_the_newest_descriptor_and_say_so() -> None:
    h = d.harness(d.FullDrift, window=50, reference_size=50, join_capacity=30)
    d.settle(h)
    h.control("model", _descriptor(4))
    h.feed("in", d.points(100, seed=1))  # no keys: nothing to join on
    h.feed("in", d.points(80, seed=2, start=100), keys=[f"k{i}" for i in range(80)])
    h.run()  # keyed, but their predictions never come: past 30 waiting, the oldest give up
    reports = d.reports(h, "inputs")
    assert [(r["model_version"], r["model_version_from"]) for r in reports] == [
        (4, "descriptor"),
        (4, "descriptor"),
    ]
    assert reports[1]["window"]["offsets"][0] == {
        "topic": "in",
        "partition": 0,
        "first": 100,
        "last": 149,
    }


def _rows(made_by: list[int], start: int) -> windows.Rows:
    n = len(made_by)
    index = np.arange(start, start + n)
    return windows.Rows(
        index.reshape(-1, 1).astype(float),
        np.zeros((n, 0), dtype=object),
        np.array(["t"] * n, dtype=object),
        np.zeros(n, dtype=np.int64),
        index,
        index,
        np.array(made_by, dtype=np.int64),
        np.ones(n, dtype=np.int8),
        np.zeros((n, 0), dtype=object),
    )


def _cut(state: versions.VersionedWindows, batches: list[list[int]]) -> list[tuple[int, list[int]]]:
    """(version, row numbers) of each window the batches of versions complete or close."""
    out: list[tuple[int, list[int]]] = []
    seen = 0
    for batch in batches:
        state, done = versions.advance(state, _rows(batch, seen))
        for window in done:
            assert window.index == len(out)
            made_by = set(window.rows.version.tolist())
            assert len(made_by) == 1
            out.append((made_by.pop(), window.rows.offset.tolist()))
        seen += len(batch)
    return out


def test_stragglers_of_an_old_version_close_with_its_window_when_the_new_one_fills() -> None:
    state = versions.VersionedWindows(4, 4, (1, 0, 0))
    # v1 x5, v2 x3, two v1 stragglers (another partition), then v2 x5
    cut = _cut(state, [[1] * 5 + [2] * 3, [1] * 2 + [2] * 5])
    assert cut == [
        (1, [0, 1, 2, 3]),
        (1, [4, 8, 9]),  # closed short when v2 completed its first window, stragglers in
        (2, [5, 6, 7, 10]),
        (2, [11, 12, 13, 14]),
    ]


def test_a_switch_on_a_window_boundary_leaves_no_empty_window() -> None:
    state = versions.VersionedWindows(3, 3, (1, 0, 0))
    cut = _cut(state, [[1] * 6, [2] * 3])
    assert cut == [(1, [0, 1, 2]), (1, [3, 4, 5]), (2, [6, 7, 8])]


def test_sliding_windows_close_short_with_the_rows_toward_the_next_window() -> None:
    state = versions.VersionedWindows(4, 2, (1, 0, 0))
    cut = _cut(state, [[1] * 5, [2] * 4])
    # v1 windows end at 4; the open one would have been rows 2..5: 2, 3, 4 so far
    assert cut == [(1, [0, 1, 2, 3]), (1, [2, 3, 4]), (2, [5, 6, 7, 8])]


def test_a_new_config_drops_the_inputs_awaiting_their_prediction_and_carries_on() -> None:
    h = d.harness(d.FullDrift, window=50, reference_size=50)
    d.settle(h)
    h.control("model", _descriptor(1))
    h.feed("in", d.points(30, seed=1), keys=[f"p{i}" for i in range(30)])
    h.run()  # they wait for their predictions
    h.control("control", {"name": "drift", "version": 1, "numeric": ["x"]})
    assert d.settle(h)["state"] == "serving"
    assert h.context.skipped["drift-config-change"] == 30
    keys = [f"p{i}" for i in range(30, 130)]
    h.feed("outputs", [_prediction(i, 1) for i in range(100)], keys=keys)
    h.feed("in", d.points(100, seed=2, start=30), keys=keys)
    h.run()
    (report,) = d.reports(h, "inputs")
    assert {f["feature"] for f in report["features"]} == {"x", "color"}
    assert (report["model_version"], report["model_version_from"]) == (1, "predictions")
