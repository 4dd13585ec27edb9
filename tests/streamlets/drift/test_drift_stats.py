"""The statistics of drift detection, on known distributions: tests, PSI, corrections, windows."""

from __future__ import annotations

import numpy as np
import pytest

from streamflow.streamlets.drift import stats, windows


def test_ks_sees_a_shift_in_mean_and_in_variance_but_not_noise() -> None:
    rng = np.random.default_rng(0)
    reference = stats.NumericReference(rng.normal(size=2000))
    same = stats.ks_test(reference, rng.normal(size=500))
    moved = stats.ks_test(reference, rng.normal(loc=0.5, size=500))
    wider = stats.ks_test(reference, rng.normal(scale=2.0, size=500))
    assert same.p_value is not None and same.p_value > 0.01
    assert moved.p_value is not None and moved.p_value < 1e-6
    assert wider.p_value is not None and wider.p_value < 1e-6


def test_ks_and_chi2_p_values_are_calibrated_under_no_drift() -> None:
    rng = np.random.default_rng(1)
    ks, chi2 = [], []
    for _ in range(400):
        numeric = stats.NumericReference(rng.normal(size=500))
        ks.append(stats.ks_test(numeric, rng.normal(size=200)).p_value)
        categorical = stats.CategoricalReference(rng.integers(4, size=500).tolist())
        chi2.append(stats.chi2_test(categorical, rng.integers(4, size=200).tolist()).p_value)
    assert 0.02 <= np.mean(np.array(ks) < 0.05) <= 0.08
    assert 0.02 <= np.mean(np.array(chi2) < 0.05) <= 0.08


def test_chi2_detects_a_change_in_the_category_mix() -> None:
    rng = np.random.default_rng(2)
    reference = stats.CategoricalReference(rng.choice(["a", "b", "c"], 1000, p=[0.5, 0.3, 0.2]))
    same = stats.chi2_test(reference, rng.choice(["a", "b", "c"], 300, p=[0.5, 0.3, 0.2]))
    mixed = stats.chi2_test(reference, rng.choice(["a", "b", "c"], 300, p=[0.3, 0.3, 0.4]))
    new_category = stats.chi2_test(reference, ["a"] * 150 + ["d"] * 150)
    assert same.p_value is not None and same.p_value > 0.01
    assert mixed.p_value is not None and mixed.p_value < 1e-6
    assert new_category.p_value is not None and new_category.p_value < 1e-6


def test_psi_is_near_zero_for_the_same_distribution_and_large_for_a_shift() -> None:
    rng = np.random.default_rng(3)
    reference = stats.NumericReference(rng.normal(size=5000), bins=10)
    assert stats.psi_numeric(reference, rng.normal(size=5000)) < 0.02
    assert stats.psi_numeric(reference, rng.normal(loc=1.0, size=5000)) > 0.5
    categorical = stats.CategoricalReference(["a"] * 50 + ["b"] * 50)
    assert stats.psi_categorical(categorical, ["a"] * 50 + ["b"] * 50) == pytest.approx(0.0)
    # PSI = sum (a - e) ln(a / e) over the two categories
    expected = (0.8 - 0.5) * np.log(0.8 / 0.5) + (0.2 - 0.5) * np.log(0.2 / 0.5)
    assert stats.psi_categorical(categorical, ["a"] * 80 + ["b"] * 20) == pytest.approx(expected)


def test_bonferroni_and_benjamini_hochberg_adjustments() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    assert stats.adjust(p, method="bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    # BH: sorted 0.005, 0.01, 0.03, 0.04 -> 0.02, 0.02, 0.04, 0.04 (monotone), original order
    assert stats.adjust(p, method="fdr") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert stats.adjust(p, method="none") == p
    with pytest.raises(ValueError, match="unknown correction"):
        stats.adjust(p, method="holm")


def _rows(start: int, n: int) -> windows.Rows:
    index = np.arange(start, start + n)
    return windows.Rows(
        index.reshape(-1, 1).astype(float),
        np.zeros((n, 0), dtype=object),
        np.array(["t"] * n, dtype=object),
        index % 2,
        index,
        index * 10,
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int8),
        np.zeros((n, 0), dtype=object),
    )


def _feed(state: windows.WindowState, sizes: list[int]) -> list[list[float]]:
    seen, out = 0, []
    for size in sizes:
        state, done = windows.advance(state, _rows(seen, size))
        for window in done:
            assert window.last == window.rows.numeric[-1, 0] - seen  # the completing row
            out.append(window.rows.numeric[:, 0].tolist())
        seen += size
    return out


def test_tumbling_windows_partition_the_stream_across_batches() -> None:
    state = windows.WindowState.start(size=4, step=4, numeric=1, categorical=0)
    cut = _feed(state, [3, 3, 5, 1])
    assert cut == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_sliding_windows_overlap_by_size_minus_step() -> None:
    state = windows.WindowState.start(size=4, step=2, numeric=1, categorical=0)
    cut = _feed(state, [5, 1, 4])
    assert cut == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]


def test_a_window_names_its_offset_range_per_partition() -> None:
    assert windows.offset_ranges(_rows(10, 5)) == [
        {"topic": "t", "partition": 0, "first": 10, "last": 14},
        {"topic": "t", "partition": 1, "first": 11, "last": 13},
    ]


def test_weights_share_alpha_unequally_and_equal_weights_change_nothing() -> None:
    p = [0.01, 0.01, 0.01, 0.04]
    # a test of weight w (of a total W) is held to alpha * w / W under Bonferroni
    weighted = stats.adjust(p, method="bonferroni", weights=[0.5, 0.25, 0.125, 0.125])
    assert weighted == pytest.approx([0.02, 0.04, 0.08, 0.32])
    for method in ("bonferroni", "fdr", "none"):
        assert stats.adjust(p, method=method, weights=[3, 3, 3, 3]) == pytest.approx(
            stats.adjust(p, method=method)
        )
