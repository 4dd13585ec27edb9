"""The autoscaling policy: lag and rates in, a replica count and its reason out. Pure.

Both targets apply the same policy (the local supervisor, the Kubernetes
operator), so it takes plain numbers, measured by the caller on the
streamlet's input (:class:`Sample`), plus its own memory (:class:`History`),
and returns a :class:`Decision` and the next memory. It performs nothing and
reads no clock, so it is tested with made-up numbers and times.

How it decides, and why:

* **By lag**, as KEDA's Kafka scaler does: ``ceil(lag / target_lag)``
  replicas, so that each carries at most ``target_lag`` records of backlog.
* **By rate**, so that a steady stream does not flap: once replicas have been
  seen working flat out (a backlog all through an interval), their
  throughput is remembered, and enough of them are kept to absorb the input
  rate with some headroom. Lag alone would scale a steady stream down to its
  minimum the moment its backlog cleared, and up again when it rebuilt.
* **Bounded** by ``min`` and ``max``, and by the input's partitions: a
  replica beyond them would have nothing to read.
* **Stabilised** the way Kubernetes' HPA is: a higher count is applied only
  once it has been wanted for the whole ``scale_up_after`` window (the lowest
  wanted in it), a lower one once it has been wanted for the whole
  ``scale_down_after`` window (the highest wanted in it), and only once the
  demand has settled there (the newest wanted is that highest), so a
  draining backlog is one step down, not a staircase down every count it
  passes through. A burst therefore costs one step up and one step down.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from streamflow.blueprint.model import AutoscaleSpec

__all__ = ["Decision", "History", "Sample", "decide"]

_HEADROOM = 1.25  # keep-up replicas are sized for 80% of their measured throughput
_CAPACITY_WEIGHT = 0.5  # how much a new flat-out reading moves the remembered one


@dataclass(frozen=True)
class Sample:
    """One measurement of a streamlet's data input, taken at ``at`` (seconds, any clock)."""

    at: float
    lag: int  # records behind, summed over the input's partitions
    produced: int  # the input's end offsets, summed: records written so far
    consumed: int  # the group's committed offsets, summed: records done so far
    partitions: int  # the most partitions among the streamlet's data inlets


@dataclass(frozen=True)
class Decision:
    replicas: int  # what to run now
    wanted: int  # what the numbers alone asked for, before the windows
    reason: str
    lag: int
    rate_in: float | None  # records/s written to the input; None on the first sample
    rate_out: float | None  # records/s the streamlet committed
    changed: bool


@dataclass(frozen=True)
class History:
    """What the policy remembers between samples; start from ``History()``."""

    last: Sample | None = None
    wanted: tuple[tuple[float, int], ...] = ()  # (at, wanted), newest last, one window long
    since: float | None = None  # when sampling began: a window needs that much history
    capacity: float | None = None  # records/s one replica does flat out, once seen
    decided_at: float | None = None  # when the count last changed
    decisions: int = 0  # how many times it changed


def decide(
    spec: AutoscaleSpec, sample: Sample, history: History, *, current: int
) -> tuple[Decision, History]:
    """The replica count for ``current`` replicas given ``sample``; the history to keep."""
    low, high = _bounds(spec, sample.partitions)
    rate_in, rate_out = _rates(history.last, sample)
    capacity = _capacity(spec, history.last, sample, history.capacity, rate_out, current)
    by_lag = math.ceil(sample.lag / spec.target_lag)
    by_rate = math.ceil(rate_in * _HEADROOM / capacity) if capacity and rate_in else 0
    wanted = max(by_lag, by_rate, 1 if sample.lag > 0 else 0)
    bounded = min(max(wanted, low), high)

    since = sample.at if history.since is None else history.since
    keep = max(spec.scale_up_after, spec.scale_down_after)
    recent = (
        *[(at, n) for at, n in history.wanted if at >= sample.at - keep],
        (sample.at, bounded),
    )
    replicas, why = _stabilised(spec, current, bounded, recent, now=sample.at, since=since)
    if not low <= current <= high:  # outside its bounds (a manual scale, a new max): fix now
        replicas, why = min(max(current, low), high), f"outside the bounds [{low}, {high}]"

    reason = _explain(why, sample.lag, spec, wanted, bounded, low, high, by_rate, rate_in)
    changed = replicas != current
    decision = Decision(replicas, wanted, reason, sample.lag, rate_in, rate_out, changed)
    return decision, dataclasses.replace(
        history,
        last=sample,
        wanted=recent,
        since=since,
        capacity=capacity,
        decided_at=sample.at if changed else history.decided_at,
        decisions=history.decisions + int(changed),
    )


def _bounds(spec: AutoscaleSpec, partitions: int) -> tuple[int, int]:
    high = min(spec.max, partitions) if partitions > 0 else spec.max
    return spec.min, max(high, spec.min)


def _rates(last: Sample | None, sample: Sample) -> tuple[float | None, float | None]:
    if last is None or sample.at <= last.at:
        return None, None
    elapsed = sample.at - last.at
    # offsets only grow; a negative step is a topic recreated or a group reset: no rate then
    produced, consumed = sample.produced - last.produced, sample.consumed - last.consumed
    if produced < 0 or consumed < 0:
        return None, None
    return produced / elapsed, consumed / elapsed


def _capacity(
    spec: AutoscaleSpec,
    last: Sample | None,
    sample: Sample,
    known: float | None,
    rate_out: float | None,
    current: int,
) -> float | None:
    """One replica's flat-out throughput, measured while a backlog lasted a whole interval.

    A replica that keeps up still shows a batch or two of lag (offsets are
    committed after the batch), so "a backlog" is half a ``target_lag``, at
    both ends of the interval: the replicas had work all along.
    """
    backlog = spec.target_lag / 2
    flat_out = current > 0 and last is not None and min(last.lag, sample.lag) >= backlog
    if not flat_out or not rate_out:
        return known
    reading = rate_out / current
    return reading if known is None else known + _CAPACITY_WEIGHT * (reading - known)


def _stabilised(
    spec: AutoscaleSpec,
    current: int,
    bounded: int,
    recent: tuple[tuple[float, int], ...],
    *,
    now: float,
    since: float,
) -> tuple[int, str]:
    if bounded == current:
        return current, "steady"
    up = bounded > current
    window = spec.scale_up_after if up else spec.scale_down_after
    if window > 0 and now - since < window:
        left = window - (now - since)
        return current, f"waiting {left:.0f}s more before scaling {'up' if up else 'down'}"
    inside = [n for at, n in recent if at >= now - window]
    if up:
        target = min(inside)
        if target <= current:
            return current, f"waiting for the lag to stay high for {window:.0f}s"
        return target, "up"
    target = max(inside)
    if target >= current:
        return current, f"waiting: {target} were wanted within the last {window:.0f}s"
    if bounded != target:
        # still falling (a backlog draining): step down once, when it has settled, rather
        # than down a staircase of every count the drain passes through
        return current, f"waiting for demand to settle: {target} wanted within {window:.0f}s"
    return target, "down"


def _explain(
    why: str,
    lag: int,
    spec: AutoscaleSpec,
    wanted: int,
    bounded: int,
    low: int,
    high: int,
    by_rate: int,
    rate_in: float | None,
) -> str:
    parts = [f"lag {lag} (target {spec.target_lag} per replica)"]
    if rate_in is not None:
        parts.append(f"input {rate_in:.0f} records/s")
    if by_rate > 0 and by_rate >= math.ceil(lag / spec.target_lag):
        parts.append(f"{by_rate} needed to keep up")
    if wanted != bounded:
        edge = "max" if bounded == high and high == spec.max else "min" if bounded == low else None
        parts.append(
            f"{wanted} wanted, held at {edge} {bounded}"
            if edge
            else f"{wanted} wanted, held at the input's {high} partitions"
        )
    if why == "steady":
        return "steady: " + ", ".join(parts)
    if why in ("up", "down"):
        return f"scaled {why}: " + ", ".join(parts)
    return f"{why}: " + ", ".join(parts)
