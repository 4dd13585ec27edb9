"""Drift in tensors (8x8 images) and text, through the same tensor mapping serving reads."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_digits

from streamflow import Inlet
from streamflow.streamlets.drift import DriftDetector, mmd, stats
from streamflow.testkit import StreamletHarness
from tests.streamlets.drift import drift_support as d

DIGITS = load_digits().images  # (1797, 8, 8), values 0..16
PIXELS = {"image": {"field": "pixels", "dtype": "float32", "shape": [64]}}
RAW = {"image": {"field": "raw", "dtype": "float32", "shape": [8, 8, 1]}}
TEXT = {"review": {"field": "text", "dtype": "string"}}
TOKENS = {"review": {"field": "tokens", "dtype": "string", "shape": [-1], "max_len": 40}}


class ImageDrift(DriftDetector):
    inp = Inlet("in", "tests.drift.Image")


class ReviewDrift(DriftDetector):
    inp = Inlet("in", "tests.drift.Review")


def _harness(cls: type[DriftDetector], inputs: dict[str, Any], **config: Any) -> StreamletHarness:
    settings = {"inputs": inputs, "window": 200, "reference_size": 500, **config}
    h = StreamletHarness(cls, config=settings, schema_paths=[d.SCHEMAS], name="drift")
    h.setup()
    d.settle(h)
    return h


def _images(n: int, *, seed: int, change: str = "") -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    images = DIGITS[rng.integers(len(DIGITS), size=n)].astype(np.float32)
    if change == "shifted":
        images = np.roll(images, 1, axis=2)  # one pixel to the right
    elif change == "noised":
        images = images + rng.normal(0.0, 3.0, size=images.shape).astype(np.float32)
    return [
        {
            "id": f"i{seed}-{i}",
            "pixels": image.reshape(64).tolist(),
            "raw": image.astype("<f4").reshape(8, 8, 1).tobytes(),
        }
        for i, image in enumerate(images)
    ]


@pytest.mark.parametrize("mapping", [PIXELS, RAW], ids=["array-64", "bytes-8x8x1"])
@pytest.mark.parametrize("change", ["shifted", "noised"])
def test_shifted_or_noised_images_drift_and_the_same_digits_do_not(
    mapping: dict[str, Any], change: str
) -> None:
    h = _harness(ImageDrift, mapping)
    h.feed("in", _images(900, seed=1))  # 500 reference, then two windows like it
    h.feed("in", _images(400, seed=2, change=change))
    h.run()
    reports = d.reports(h)
    assert [r["drifted"] for r in reports] == [False, False, True, True]
    after = reports[2]
    whole = [f for f in after["features"] if f["test"] == "MMD"]
    assert len(whole) == 1 and whole[0]["feature"] == "image" and whole[0]["kind"] == "TENSOR"
    assert whole[0]["drifted"] and whole[0]["adjusted_p_value"] <= 0.05
    elements = [f for f in after["features"] if f["test"] == "KS"]
    assert len(elements) == 64 and {f["kind"] for f in elements} == {"TENSOR"}
    assert elements[0]["feature"] == ("image[0]" if mapping is PIXELS else "image[0,0,0]")
    assert any(f["drifted"] for f in elements)
    assert after["message"].startswith("1 of 1 features drifted: image")
    assert not h.dead_letters


def test_images_from_the_same_distribution_stay_within_alpha_over_seeds() -> None:
    alarms = total = 0
    for seed in range(6):
        h = _harness(ImageDrift, PIXELS, alpha=0.05)
        h.feed("in", _images(1300, seed=100 + seed))
        h.run()
        reports = d.reports(h)
        assert len(reports) == 4
        alarms += sum(r["drifted"] for r in reports)
        total += len(reports)
        h.teardown()
    assert alarms <= 3, f"{alarms} false alarms in {total} windows at alpha 0.05"


def test_mmd_sees_a_change_in_how_elements_move_together_that_per_element_tests_miss() -> None:
    rng = np.random.default_rng(7)
    independent = rng.normal(size=(600, 2))
    correlated = rng.multivariate_normal([0, 0], [[1, 0.95], [0.95, 1]], size=200)
    assert mmd.mmd_test(independent, correlated, seed=1).p_value < 0.01
    for column in range(2):  # each coordinate alone is still N(0, 1)
        reference = stats.NumericReference(independent[:, column])
        p_value = stats.ks_test(reference, correlated[:, column]).p_value
        assert p_value is not None and p_value > 0.01


def test_mmd_p_values_are_calibrated_under_no_drift_and_cost_is_bounded() -> None:
    rng = np.random.default_rng(8)
    reference = rng.normal(size=(2000, 16))
    p_values = [
        mmd.mmd_test(reference, rng.normal(size=(150, 16)), permutations=200, seed=i).p_value
        for i in range(80)
    ]
    assert 0.0 < np.mean(np.array(p_values) <= 0.05) <= 0.12
    result = mmd.mmd_test(np.zeros((5, 3)), np.ones((5, 3)), permutations=99)
    assert result.p_value >= 1 / 100  # never below one over the permutations


VOCABULARY = [f"w{i}" for i in range(300)]
ZIPF = 1.0 / np.arange(1, 301) ** 1.1
NEW_WORDS = [f"n{i}" for i in range(100)]


def _reviews(
    n: int, *, seed: int, new_words: float = 0.0, length: float = 12.0
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        count = 3 + int(rng.poisson(length - 3))
        words = list(rng.choice(VOCABULARY, size=count, p=ZIPF / ZIPF.sum()))
        for j in np.flatnonzero(rng.random(count) < new_words):
            words[j] = str(rng.choice(NEW_WORDS))
        text = " ".join(words).capitalize() + "."
        out.append({"id": f"r{seed}-{i}", "text": text, "tokens": [w.lower() for w in words]})
    return out


@pytest.mark.parametrize("mapping", [TEXT, TOKENS], ids=["raw-text", "token-sequence"])
def test_reviews_with_new_vocabulary_drift_and_same_distribution_ones_do_not(
    mapping: dict[str, Any],
) -> None:
    h = _harness(ReviewDrift, mapping)
    h.feed("in", _reviews(900, seed=1))
    h.feed("in", _reviews(400, seed=2, new_words=0.3))
    h.run()
    reports = d.reports(h)
    assert [r["drifted"] for r in reports] == [False, False, True, True]
    by_test = {f["test"]: f for f in reports[2]["features"]}
    assert set(by_test) == {"KS", "CHI2", "OOV"}
    assert {f["kind"] for f in by_test.values()} == {"TEXT"}
    assert by_test["OOV"]["drifted"] and by_test["OOV"]["statistic"] == pytest.approx(0.3, abs=0.05)
    assert by_test["OOV"]["threshold"] == 0.1
    assert by_test["CHI2"]["drifted"]
    assert not by_test["KS"]["drifted"]  # the reviews are as long as before
    before = {f["test"]: f for f in reports[0]["features"]}
    assert before["OOV"]["statistic"] < 0.02


def test_longer_reviews_drift_in_length_only() -> None:
    h = _harness(ReviewDrift, TEXT)
    h.feed("in", _reviews(700, seed=3))
    h.feed("in", _reviews(200, seed=4, length=20.0))
    h.run()
    same, longer = d.reports(h)
    drifted = {f["test"] for f in longer["features"] if f["drifted"]}
    assert not same["drifted"] and drifted == {"KS"}


def test_text_from_the_same_distribution_stays_within_alpha_over_seeds() -> None:
    alarms = total = 0
    for seed in range(6):
        h = _harness(ReviewDrift, TEXT, alpha=0.05)
        h.feed("in", _reviews(1300, seed=200 + seed))
        h.run()
        reports = d.reports(h)
        assert len(reports) == 4
        alarms += sum(r["drifted"] for r in reports)
        total += len(reports)
        h.teardown()
    assert alarms <= 3, f"{alarms} false alarms in {total} windows at alpha 0.05"


def test_records_the_mapping_cannot_read_are_counted_and_left_out() -> None:
    h = _harness(ImageDrift, PIXELS, window=100, reference_size=100)
    good = _images(300, seed=5)
    bad = [{**good[i], "pixels": good[i]["pixels"][:10]} for i in range(0, 250, 25)]
    h.feed("in", good[:200] + bad + good[200:])
    h.run()
    reports = d.reports(h)  # 100 reference, then 2 windows of 100 (each bad record in one)
    assert [r["drifted"] for r in reports] == [False, False] and not h.dead_letters
    assert h.context.skipped["drift-unreadable-input"] == 10


def test_inputs_that_cannot_be_tested_are_refused_at_setup() -> None:
    ragged = {"seq": {"field": "pixels", "dtype": "float32", "shape": [-1]}}
    missing = {"image": {"field": "pixel", "dtype": "float32", "shape": [64]}}
    for inputs, message in (
        (ragged, "a ragged numeric input needs max_len"),
        (missing, "reads field 'pixel', which the input records do not have"),
    ):
        h = StreamletHarness(
            ImageDrift, config={"inputs": inputs}, schema_paths=[d.SCHEMAS], name="drift"
        )
        with pytest.raises(ValueError, match=message):
            h.setup()


def test_verify_finds_inputs_that_do_not_fit_the_input_records() -> None:
    schema = json.loads((d.SCHEMAS / "Image.avsc").read_text())
    config = {
        "inputs": {
            "image": {"field": "pixel", "dtype": "float32", "shape": [64]},
            "name": {"field": "id", "dtype": "float32", "shape": [8, 8]},
            "fine": {"field": "raw", "dtype": "float32", "shape": [8, 8, 1]},
        }
    }
    found = ImageDrift.check_config(config, schemas={"in": schema})
    assert [(p.code, p.param) for p in found] == [
        ("unknown-tensor-field", "inputs"),
        ("tensor-field-type", "inputs"),
    ]
    assert "'pixel'" in found[0].message and "'id'" in found[1].message
    assert ImageDrift.check_config({"inputs": RAW}, schemas={"in": schema}) == []
