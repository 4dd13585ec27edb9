"""The arithmetic of rollout evidence: counters per version, merged across windows.

A window's counters for one version (:class:`Tally`) are plain dicts so that they live
in durable state and travel in a ``RolloutEvidence`` record as they are. Latencies are
counted in fixed buckets (:data:`LATENCY_BOUNDS`) rather than kept, so that windows of
every partition merge exactly and a p99 over a whole rollout step is one sum away.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["LATENCY_BOUNDS", "empty", "js_distance", "merge", "percentile", "tally_latency"]

#: Upper bounds of the latency buckets, in ms: 0.05 ms growing by a quarter, past 10 s.
LATENCY_BOUNDS: tuple[float, ...] = tuple(0.05 * 1.25**i for i in range(56))

_COUNTS = ("records", "failures", "labelled", "correct", "unlabelled")


def empty() -> dict[str, Any]:
    """A version's counters before anything is counted."""
    return {
        **dict.fromkeys(_COUNTS, 0),
        "squared_error": 0.0,
        "classes": {},
        "latency": [0] * (len(LATENCY_BOUNDS) + 1),
    }


def tally_latency(counters: dict[str, Any], latency_ms: float) -> None:
    """Count one latency (the last bucket holds what passes every bound)."""
    if math.isfinite(latency_ms):
        counters["latency"][bisect.bisect_left(LATENCY_BOUNDS, latency_ms)] += 1


def merge(into: dict[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """Add ``other``'s counters to ``into`` (in place; returned)."""
    for name in _COUNTS:
        into[name] += int(other.get(name, 0))
    into["squared_error"] += float(other.get("squared_error", 0.0))
    classes = into["classes"]
    for label, count in (other.get("classes") or {}).items():
        classes[label] = classes.get(label, 0) + int(count)
    latency = other.get("latency") or ()
    buckets = into["latency"]
    for index, count in enumerate(latency[: len(buckets)]):
        buckets[index] += int(count)
    return into


def percentile(latency: Iterable[int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of bucketed latencies: the upper bound of the bucket it
    falls in (so never below the truth by more than a bucket's quarter); None if empty."""
    counts = list(latency)
    total = sum(counts)
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            return LATENCY_BOUNDS[min(index, len(LATENCY_BOUNDS) - 1)]
    return LATENCY_BOUNDS[-1]


def js_distance(first: Mapping[str, int], second: Mapping[str, int]) -> float | None:
    """The Jensen-Shannon distance (base 2: 0 the same, 1 disjoint) between two class
    counts; None when either is empty."""
    n1, n2 = sum(first.values()), sum(second.values())
    if not n1 or not n2:
        return None
    divergence = 0.0
    for label in sorted(set(first) | set(second)):  # one order: the same float every run
        p, q = first.get(label, 0) / n1, second.get(label, 0) / n2
        m = (p + q) / 2
        if p:
            divergence += p / 2 * math.log2(p / m)
        if q:
            divergence += q / 2 * math.log2(q / m)
    return math.sqrt(max(divergence, 0.0))
