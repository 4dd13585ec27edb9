"""The drift streamlet's logic, in memory: when drift is reported, and what each report says."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.streamlets.drift import drift_support as d


def _first_drifted(reports: list[dict[str, Any]]) -> int | None:
    return next((r["window"]["index"] for r in reports if r["drifted"]), None)


@pytest.mark.parametrize(
    ("shift", "scale"), [(0.8, 1.0), (0.0, 2.0)], ids=["mean-shift", "variance-shift"]
)
def test_drift_is_reported_in_the_first_window_fully_past_the_change(
    shift: float, scale: float
) -> None:
    k, window, reference = 2_130, 200, 1_000
    h = d.harness(d.InputDrift, window=window, reference_size=reference, alpha=0.01)
    d.settle(h)
    h.feed("in", d.points(4_000, seed=8, shift=shift, scale=scale, shift_at=k))
    h.run()
    reports = d.reports(h)
    # windows start after the reference: window i covers records [1000 + 200 i, 1200 + 200 i)
    first_past = next(i for i in range(20) if reference + window * i >= k)
    by_index = {r["window"]["index"]: r for r in reports}
    assert by_index[first_past]["drifted"], by_index[first_past]["message"]
    assert not any(r["drifted"] for i, r in by_index.items() if reference + window * (i + 1) <= k)
    flagged = {f["feature"] for f in by_index[first_past]["features"] if f["drifted"]}
    assert flagged == {"x"}
    assert _first_drifted(reports) in (first_past - 1, first_past)  # or the straddling window
    alert = h.values("alerts")[0]
    assert alert["drifted"] and alert["window"]["index"] == _first_drifted(reports)
    assert alert["severity"] in ("MEDIUM", "HIGH")
    offsets = by_index[first_past]["window"]["offsets"]
    assert offsets == [{"topic": "in", "partition": 0, "first": 2200, "last": 2399}]
    assert not h.dead_letters


@pytest.mark.parametrize("correction", ["bonferroni", "fdr"])
def test_false_alarms_stay_at_alpha_over_20_seeds(correction: str) -> None:
    alpha, windows_per_seed = 0.05, 10
    alarms = total = 0
    for seed in range(20):
        h = d.harness(
            d.InputDrift, window=200, reference_size=1000, alpha=alpha, correction=correction
        )
        d.settle(h)
        h.feed("in", d.points(1000 + 200 * windows_per_seed, seed=100 + seed))
        h.run()
        reports = d.reports(h)
        assert len(reports) == windows_per_seed
        alarms += sum(r["drifted"] for r in reports)
        total += len(reports)
        h.teardown()
    assert alarms / total <= alpha + 0.025, f"{alarms} false alarms in {total} windows"


def test_chi_squared_detects_a_change_in_the_category_mix() -> None:
    h = d.harness(d.InputDrift, window=300, reference_size=1000)
    d.settle(h)
    h.feed("in", d.points(1600, seed=3))
    h.feed("in", d.points(600, seed=4, start=1600, colors=(0.2, 0.3, 0.5)))
    h.run()
    before, _, after = d.reports(h)[:3]
    assert not before["drifted"] and after["drifted"]
    chi2 = next(f for f in after["features"] if f["test"] == "CHI2")
    assert chi2["feature"] == "color" and chi2["kind"] == "CATEGORICAL" and chi2["drifted"]
    assert chi2["adjusted_p_value"] < 1e-6
    assert not any(f["drifted"] for f in after["features"] if f["feature"] in ("x", "y"))


def test_sliding_windows_report_every_step() -> None:
    h = d.harness(d.InputDrift, window=200, step=50, reference_size=500)
    d.settle(h)
    h.feed("in", d.points(1000, seed=5))
    h.run()
    reports = d.reports(h)
    assert [r["window"]["index"] for r in reports] == list(range(7))  # ends 700, 750, ... 1000
    assert {r["window"]["records"] for r in reports} == {200}
    assert reports[1]["window"]["offsets"][0]["first"] == 550
    assert "sliding by 50" in h.values("status")[0]["message"]


def _outputs(n: int, *, seed: int, confidence: float, accuracy: float) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        predicted = int(rng.integers(3))
        probabilities = [(1 - confidence) / 2] * 3
        probabilities[predicted] = confidence
        label = predicted if rng.random() < accuracy else (predicted + 1) % 3
        out.append({"probabilities": probabilities, "predicted": predicted, "label": label})
    return out


def test_output_signals_catch_a_confidence_drop_and_labels_joined_by_key_an_error_rise() -> None:
    h = d.harness(d.OutputDrift, window=250, reference_size=500)
    d.settle(h)
    healthy = _outputs(1500, seed=1, confidence=0.9, accuracy=0.95)
    unsure = _outputs(1000, seed=2, confidence=0.6, accuracy=0.5)
    stream = healthy + unsure
    keys = [f"k{i}" for i in range(len(stream))]
    for start in range(0, len(stream), 100):  # labels arrive a batch after their predictions
        chunk = stream[start : start + 100]
        h.feed("outputs", [{**v, "label": None} for v in chunk], keys=keys[start : start + 100])
        if start:
            h.feed(
                "labels",
                [{"label": v["label"]} for v in stream[start - 100 : start]],
                keys=keys[start - 100 : start],
            )
    h.run()
    reports = d.reports(h, "outputs")
    fired = {
        (s["signal"], s["detector"]): r["window"]["index"]
        for r in reports
        for s in r["signals"]
        if s["drifted"]
    }
    change = (1500 - 500) // 250  # the first window with the new behaviour
    assert change <= fired[("confidence", "ADWIN")] <= change + 1
    assert change <= fired[("error_rate", "ADWIN")] <= change + 2
    assert ("class=0", "ADWIN") not in fired  # the class mix did not change
    assert not any(r["drifted"] for r in reports[:change])
    error = [s for s in reports[change + 2]["signals"] if s["signal"] == "error_rate"]
    assert error and error[0]["mean"] == pytest.approx(0.5, abs=0.12)
    assert reports[change]["drifted"] and "confidence" in reports[change]["message"]


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


def test_reports_name_the_model_version_from_descriptors_and_from_outputs() -> None:
    h = d.harness(d.FullDrift, window=100, reference_size=100)
    d.settle(h)
    h.control("model", _descriptor(3))
    h.feed("in", d.points(300, seed=1))
    outputs = _outputs(300, seed=1, confidence=0.8, accuracy=0.9)
    h.feed(
        "outputs",
        [{**o, "model": "points", "model_version": 3 + i // 200} for i, o in enumerate(outputs)],
    )
    h.run()
    assert [r["model_version"] for r in d.reports(h, "inputs")] == [3, 3]
    assert [r["model_version"] for r in d.reports(h, "outputs")] == [3, 4]
    assert {r["model"] for r in h.values("reports")} == {"points"}
    h.control("model", _descriptor(5))
    h.feed("in", d.points(100, seed=2, start=300))
    h.run()
    assert d.reports(h, "inputs")[-1]["model_version"] == 5


def _write(path: Path, rows: list[dict[str, Any]], fmt: str) -> bytes:
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        header = list(rows[0])
        lines = [",".join(header)] + [",".join(str(r[c]) for c in header) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path.read_bytes()


def _config(version: int, **fields: Any) -> dict[str, Any]:
    return {"name": "drift", "version": version, **fields}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_drift_config_swaps_in_a_dataset_reference_live(tmp_path: Path, fmt: str) -> None:
    dataset = tmp_path / f"reference.{fmt}"
    digest = hashlib.sha256(_write(dataset, d.points(2000, seed=11), fmt)).hexdigest()
    h = d.harness(
        d.InputDrift, allowlist=[tmp_path.as_uri() + "/"], cache_dir=str(tmp_path / "cache")
    )
    d.settle(h)
    update = _config(
        1, reference_location=dataset.as_uri(), reference_sha256=digest, window=250, alpha=0.01
    )
    loading = h.control("control", update)
    assert [o.value["state"] for o in loading] == ["loading"]
    status = d.settle(h)
    assert status["state"] == "serving" and "2000 rows" in status["message"], status["message"]
    h.feed("in", d.points(500, seed=12))  # no first-N reference needed: reports start at once
    h.feed("in", d.points(500, seed=13, start=500, shift=1.0, shift_at=0))
    h.run()
    reports = d.reports(h)
    assert [(r["config_version"], r["window"]["records"], r["drifted"]) for r in reports] == [
        (1, 250, False),
        (1, 250, False),
        (1, 250, True),
        (1, 250, True),
    ]
    assert all(f["threshold"] == 0.01 for f in reports[0]["features"] if f["test"] == "KS")


def test_bad_configs_are_rejected_and_the_old_one_keeps_working(tmp_path: Path) -> None:
    h = d.harness(d.InputDrift, allowlist=[tmp_path.as_uri() + "/"])
    d.settle(h)
    cases = {
        "unknown-feature": _config(1, numeric=["x", "z"]),
        "outside-allowlist": _config(2, reference_location="file:///etc/passwd.csv"),
        "bad-window": _config(3, window=1),
    }
    for case, config in cases.items():
        (status,) = [o.value for o in h.control("control", config)]
        assert status["state"] == "rejected", case
    statuses = [o.value["message"] for o in h.all_outputs if o.outlet == "status"][1:]
    assert "no field 'z'" in statuses[0] and "(they have: color, id, x, y)" in statuses[0]
    assert "not in the allowlist" in statuses[1]
    assert "window must be at least 2" in statuses[2]
    (older,) = [o.value for o in h.control("control", _config(0, window=300))]
    assert older["state"] == "rejected" and "not newer" in older["message"]
    h.feed("in", d.points(1400, seed=1))
    h.run()
    assert [r["config_version"] for r in d.reports(h)] == [0, 0]  # still the first config


@pytest.mark.parametrize("case", ["unreachable", "mismatched-features", "wrong-sha256"])
def test_a_bad_reference_is_reported_and_nothing_is_lost(tmp_path: Path, case: str) -> None:
    dataset = tmp_path / "reference.jsonl"
    _write(dataset, [{"x": 1.0, "y": 2.0, "colour": "red"}] * 10, "jsonl")
    location = {
        "unreachable": "http://127.0.0.1:9/reference.jsonl",
        "mismatched-features": dataset.as_uri(),
        "wrong-sha256": dataset.as_uri(),
    }[case]
    h = d.harness(
        d.InputDrift,
        reference=location,
        reference_sha256="0" * 64 if case == "wrong-sha256" else "",
        allowlist=[tmp_path.as_uri() + "/", "http://127.0.0.1:"],
        cache_dir=str(tmp_path / "cache"),
    )
    status = d.settle(h)
    reason = {
        "unreachable": "cannot read http://127.0.0.1:9/reference.jsonl",
        "mismatched-features": "has no column 'color' (it has: colour, x, y)",
        "wrong-sha256": "sha256 mismatch",
    }[case]
    assert status["state"] == "failed" and reason in status["message"], status["message"]
    h.feed("in", d.points(600, seed=1))
    h.run()  # the streamlet stays up: every record is consumed, and windows still report
    assert h.pending == 0 and not h.dead_letters
    reports = d.reports(h)
    assert len(reports) == 3 and not any(r["drifted"] for r in reports)
    assert all(r["message"].startswith("no reference: ") for r in reports)
    # a good config recovers it
    good = tmp_path / "good.jsonl"
    _write(good, d.points(500, seed=2), "jsonl")
    h.control("control", _config(1, reference_location=good.as_uri()))
    assert d.settle(h)["state"] == "serving"
    h.feed("in", d.points(200, seed=3, start=600))
    h.run()
    assert d.reports(h)[-1]["features"] and d.reports(h)[-1]["config_version"] == 1
