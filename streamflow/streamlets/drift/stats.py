"""The statistics of windowed data drift: two-sample tests, PSI, multiple-testing corrections.

Pure functions over numpy arrays, so each is unit-tested against known
distributions without a stream. A reference is prepared once (sorted values,
PSI bins, category counts) and compared with every window, because the
reference is large and fixed while windows come and go.

* Numeric features: the two-sample Kolmogorov-Smirnov test (scipy), which
  sees a shift in location, scale or shape, and needs no binning.
* Categorical features: the chi-squared test of homogeneity on the 2 x K
  table of reference and window counts. The reference is itself a sample,
  so this is the two-sample test, not a goodness-of-fit against fixed
  proportions.
* PSI (population stability index) over reference-quantile bins or the
  categories. It has no p-value; it is a magnitude, read against a threshold
  (0.1 "some", 0.25 "significant" by the usual rule of thumb).
* Testing F features at level alpha each would raise false alarms roughly
  F-fold, so p-values are corrected across the window's tests: Bonferroni
  controls the family-wise error rate, Benjamini-Hochberg (FDR) the expected
  share of false discoveries and is less conservative. A tensor input adds
  one test per element; so that a 784-pixel image does not take 784 shares
  of alpha from a scalar feature, each input gets one equal share, which its
  own tests split (weighted Bonferroni or weighted BH).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

__all__ = [
    "CORRECTIONS",
    "CategoricalReference",
    "NumericReference",
    "TestResult",
    "adjust",
    "chi2_test",
    "ks_test",
    "psi_categorical",
    "psi_numeric",
]

CORRECTIONS = ("bonferroni", "fdr", "none")
_EPSILON = 1e-4  # floor of a bin's share in PSI, so an empty bin does not give infinity


@dataclasses.dataclass(frozen=True)
class TestResult:
    statistic: float
    p_value: float | None


class NumericReference:
    """A numeric feature's reference sample, prepared for KS and PSI."""

    def __init__(self, values: np.ndarray, *, bins: int = 10) -> None:
        clean = np.asarray(values, dtype=np.float64)
        self.values = np.sort(clean[np.isfinite(clean)])
        if self.values.size == 0:
            raise ValueError("the reference has no finite values")
        quantiles = np.quantile(self.values, np.linspace(0, 1, bins + 1)[1:-1])
        self.edges = np.unique(quantiles)
        self.shares = _shares(np.searchsorted(self.edges, self.values, side="right"), self.bins)

    @property
    def bins(self) -> int:
        return len(self.edges) + 1


class CategoricalReference:
    """A categorical feature's reference counts."""

    def __init__(self, values: Sequence[object]) -> None:
        labels, counts = np.unique(np.asarray([str(v) for v in values]), return_counts=True)
        if labels.size == 0:
            raise ValueError("the reference has no values")
        self.counts = dict(zip(labels.tolist(), counts.tolist(), strict=True))


def ks_test(reference: NumericReference, window: np.ndarray) -> TestResult:
    """Two-sample KS: the largest gap between the empirical CDFs, and its p-value."""
    current = np.asarray(window, dtype=np.float64)
    current = current[np.isfinite(current)]
    if current.size == 0:
        return TestResult(0.0, 1.0)
    result = scipy_stats.ks_2samp(reference.values, current, method="auto")
    return TestResult(float(result.statistic), float(result.pvalue))


def chi2_test(reference: CategoricalReference, window: Sequence[object]) -> TestResult:
    """Chi-squared test of homogeneity between the reference's and the window's category mix."""
    current = _counts(window)
    categories = sorted(set(reference.counts) | set(current))
    table = np.array(
        [
            [reference.counts.get(c, 0) for c in categories],
            [current.get(c, 0) for c in categories],
        ],
        dtype=np.float64,
    )
    if table.shape[1] < 2 or table[1].sum() == 0:
        return TestResult(0.0, 1.0)
    statistic, p_value, _, _ = scipy_stats.chi2_contingency(table, correction=False)
    return TestResult(float(statistic), float(p_value))


def psi_numeric(reference: NumericReference, window: np.ndarray) -> float:
    """PSI of the window against the reference's quantile bins."""
    current = np.asarray(window, dtype=np.float64)
    current = current[np.isfinite(current)]
    if current.size == 0:
        return 0.0
    shares = _shares(np.searchsorted(reference.edges, current, side="right"), reference.bins)
    return _psi(reference.shares, shares)


def psi_categorical(reference: CategoricalReference, window: Sequence[object]) -> float:
    """PSI of the window's category mix against the reference's."""
    current = _counts(window)
    categories = sorted(set(reference.counts) | set(current))
    expected = np.array([reference.counts.get(c, 0) for c in categories], dtype=np.float64)
    actual = np.array([current.get(c, 0) for c in categories], dtype=np.float64)
    if actual.sum() == 0:
        return 0.0
    return _psi(expected / expected.sum(), actual / actual.sum())


def adjust(
    p_values: Sequence[float], *, method: str, weights: Sequence[float] | None = None
) -> list[float]:
    """p-values adjusted for testing them together: compare each with alpha.

    ``weights`` (positive, any scale) share alpha unequally: a test of weight w
    gets ``alpha * w / sum(weights)`` under Bonferroni, and weighted
    Benjamini-Hochberg under FDR. Equal weights are the plain corrections.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0 or method == "none":
        return [float(x) for x in p]
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
    p = p / (w * m / w.sum())  # each p-value against its share of alpha, as if shares were equal
    if method == "bonferroni":
        return [float(x) for x in np.minimum(p * m, 1.0)]
    if method == "fdr":  # Benjamini-Hochberg step-up, as monotone adjusted p-values
        order = np.argsort(p)
        scaled = p[order] * m / np.arange(1, m + 1)
        monotone = np.minimum.accumulate(scaled[::-1])[::-1]
        adjusted = np.empty(m)
        adjusted[order] = np.minimum(monotone, 1.0)
        return [float(x) for x in adjusted]
    raise ValueError(f"unknown correction {method!r}: use one of {', '.join(CORRECTIONS)}")


def _shares(bin_index: np.ndarray, bins: int) -> np.ndarray:
    counts = np.bincount(bin_index, minlength=bins).astype(np.float64)
    shares: np.ndarray = counts / counts.sum()
    return shares


def _psi(expected: np.ndarray, actual: np.ndarray) -> float:
    e = np.maximum(expected, _EPSILON)
    a = np.maximum(actual, _EPSILON)
    return float(np.sum((a - e) * np.log(a / e)))


def _counts(values: Sequence[object]) -> dict[str, int]:
    labels, counts = np.unique(np.asarray([str(v) for v in values]), return_counts=True)
    return dict(zip(labels.tolist(), counts.tolist(), strict=True))
