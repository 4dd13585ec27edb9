"""Deciding a rollout from its evidence: hold, advance, promote or roll back.

A rollout policy is a list of steps (a shadow, then canary shares) and the evidence
each must show before the next; after the last, the candidate is promoted. What ends
it early is a rollback: the candidate's accuracy is lower than the stable version's by
more than ``max_drop``, its share of failed records passes ``max_error_rate``, its
p99 latency passes ``max_latency_p99_ms``, or the drift detector raised an alarm on its
outputs. :func:`decide` is pure: the controller that feeds it windows of evidence
and acts on its verdicts is a streamlet, and what it decides is a record.

Looking at the evidence after every window must not make a false promotion likely. So
the accuracies are compared with an *always-valid* confidence interval
(:func:`accuracy_interval`): a normal-mixture sequential test on the difference of
the two accuracies (the mixture sequential probability ratio test, with each arm's
variance estimated from its own labels). However often it is looked at, the chance
that the interval ever leaves out the true difference is at most ``alpha``, so a
candidate that is truly no better than the stable version (and ``margin`` 0) is
promoted at most at that rate; the tests check it over 1,000 seeded rollouts. The
price of that guarantee is labels. Over 1,000 seeded rollouts read every 100 labels
(``tests/models/test_rollout_policy.py``), against a stable version right 85% of the
time: a candidate as good was promoted in 0.6-1.0% of them (``alpha`` 0.05), one a point
worse in 0.4%; one five points worse was always rolled back, after a median of 1,000
labels on each arm and 2,400 at the 95th percentile; one five points better was always
promoted, after a median of 800.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

from streamflow.models.rollout import RolloutMode

__all__ = [
    "POLICY_PARAMETER",
    "Arm",
    "Decision",
    "Policy",
    "PolicyError",
    "Step",
    "Verdict",
    "accuracy_interval",
    "decide",
]


#: The candidate descriptor's parameter that carries its rollout policy (JSON).
POLICY_PARAMETER = "rollout-policy"


class PolicyError(ValueError):
    """A rollout policy that cannot run, and why (the field named)."""


@dataclasses.dataclass(frozen=True)
class Arm:
    """One version's evidence at the current step: what it served, failed and got right."""

    records: int = 0  # outputs it made
    failures: int = 0  # records it failed (dead letters, failed rows)
    labelled: int = 0  # predictions joined with their label
    correct: int = 0  # ... that were right
    latency_p99_ms: float | None = None
    drift_alarm: bool = False  # the drift detector's alarm on its outputs

    def __post_init__(self) -> None:
        counts = (self.records, self.failures, self.labelled, self.correct)
        if min(counts) < 0 or self.correct > self.labelled:
            raise ValueError(
                f"an arm's counts are not evidence: {self.correct} right of {self.labelled} "
                f"labelled, {self.records} records, {self.failures} failed"
            )

    @property
    def error_rate(self) -> float:
        served = self.records + self.failures
        return self.failures / served if served else 0.0


@dataclasses.dataclass(frozen=True)
class Step:
    """One stage of a rollout, and what it must show before the next."""

    mode: RolloutMode
    share: float = 0.0  # percent of the keys (a canary); a shadow meets every record
    windows: int = 1  # evidence windows it lasts at least
    min_records: int = 0  # candidate outputs it needs
    min_labels: int = 0  # candidate labels it needs


@dataclasses.dataclass(frozen=True)
class Policy:
    """The steps, and what promotes or rolls back (see the module docstring)."""

    steps: tuple[Step, ...]
    alpha: float = 0.05  # the chance of a false verdict on accuracy, however often looked at
    margin: float = 0.0  # promote once the candidate is surely better than stable - margin
    max_drop: float = 0.0  # roll back once it is surely worse than stable - max_drop
    tau: float = 0.05  # the accuracy difference the test is tuned to find soonest
    labels: bool = True  # promotion waits for labels; False: the last step's minimums do
    max_labels: int | None = None  # no verdict on accuracy by then: rolled back
    max_error_rate: float | None = None
    max_latency_p99_ms: float | None = None
    rollback_on_drift: bool = True

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a rollout policy needs at least one step")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha {self.alpha} must be between 0 and 1")
        if self.tau <= 0.0:
            raise ValueError(f"tau {self.tau} must be above 0")
        for step in self.steps:
            if step.mode not in (RolloutMode.SHADOW, RolloutMode.CANARY):
                raise ValueError(f"a step is a shadow or a canary, not {step.mode.value}")
            if not 0.0 <= step.share <= 100.0:
                raise ValueError(f"a step's share {step.share} is not a percent")
            if step.windows < 1 or step.min_records < 0 or step.min_labels < 0:
                raise ValueError("a step lasts at least one window and needs no negative count")
            if self.max_labels is not None and step.min_labels > self.max_labels:
                raise ValueError(
                    f"a step needs {step.min_labels} labels, past max_labels {self.max_labels}"
                )

    @classmethod
    def from_mapping(cls, raw: Any) -> Policy:
        """A policy from its YAML or JSON form (what ``--policy FILE``, a blueprint's
        config and a candidate's ``rollout-policy`` parameter hold); PolicyError names
        the field that is wrong::

            steps:
              - {mode: shadow, windows: 2, min_records: 200}
              - {mode: canary, share: 10, windows: 2, min_labels: 100}
              - {mode: canary, share: 50, min_labels: 300}
            max_drop: 0.02
            max_labels: 5000
            max_error_rate: 0.01
        """
        if not isinstance(raw, Mapping):
            raise PolicyError(f"a rollout policy is a mapping with steps, not {_shown(raw)}")
        _known(raw, _POLICY_FIELDS, "the policy")
        steps = raw.get("steps")
        if not isinstance(steps, list) or not steps:
            raise PolicyError("the policy's steps: give a list of at least one step")
        parsed = []
        for index, step in enumerate(steps, 1):
            where = f"step {index}"
            if not isinstance(step, Mapping):
                raise PolicyError(f"{where} is a mapping (mode, share, ...), not {_shown(step)}")
            _known(step, _STEP_FIELDS, where)
            mode = str(step.get("mode", "")).upper()
            if mode not in (RolloutMode.SHADOW, RolloutMode.CANARY):
                raise PolicyError(
                    f"{where}'s mode is shadow or canary, not {_shown(step.get('mode'))}"
                )
            parsed.append(
                Step(
                    RolloutMode(mode),
                    share=_number(step, "share", where, 0.0),
                    windows=int(_number(step, "windows", where, 1, whole=True)),
                    min_records=int(_number(step, "min_records", where, 0, whole=True)),
                    min_labels=int(_number(step, "min_labels", where, 0, whole=True)),
                )
            )
        limits: dict[str, Any] = {}
        for name in ("alpha", "margin", "max_drop", "tau", "max_error_rate", "max_latency_p99_ms"):
            if raw.get(name) is not None:
                limits[name] = _number(raw, name, "the policy", 0.0)
        if raw.get("max_labels") is not None:
            limits["max_labels"] = int(_number(raw, "max_labels", "the policy", 0, whole=True))
        for name in ("labels", "rollback_on_drift"):
            if name in raw:
                if not isinstance(raw[name], bool):
                    raise PolicyError(
                        f"the policy's {name} is true or false, not {_shown(raw[name])}"
                    )
                limits[name] = raw[name]
        if limits.get("labels", True) and "max_labels" not in limits:
            raise PolicyError(
                "the policy never ends for a candidate as good as the stable version: set "
                "max_labels (rolled back with no verdict by then), or labels: false"
            )
        try:
            return cls(steps=tuple(parsed), **limits)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None

    def step_of(self, mode: RolloutMode, share: float) -> int | None:
        """The index of the step a rollout meeting ``mode`` and ``share`` is at (a shadow's
        share does not matter); None if it is at none of them."""
        for index, step in enumerate(self.steps):
            if step.mode is mode and (mode is RolloutMode.SHADOW or abs(step.share - share) < 1e-9):
                return index
        return None

    def to_mapping(self) -> dict[str, Any]:
        """The form :meth:`from_mapping` reads (JSON-ready)."""
        raw = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "steps"}
        raw["steps"] = [
            {
                "mode": step.mode.value.lower(),
                "share": step.share,
                "windows": step.windows,
                "min_records": step.min_records,
                "min_labels": step.min_labels,
            }
            for step in self.steps
        ]
        return raw


_POLICY_FIELDS = frozenset(
    (
        "steps",
        "alpha",
        "margin",
        "max_drop",
        "tau",
        "labels",
        "max_labels",
        "max_error_rate",
        "max_latency_p99_ms",
        "rollback_on_drift",
    )
)
_STEP_FIELDS = frozenset(("mode", "share", "windows", "min_records", "min_labels"))


def _known(raw: Mapping[str, Any], fields: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in fields)
    if unknown:
        raise PolicyError(
            f"{where} has no field {', '.join(unknown)} (it has: {', '.join(sorted(fields))})"
        )


def _number(
    raw: Mapping[str, Any], name: str, where: str, default: float, *, whole: bool = False
) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PolicyError(f"{where}'s {name} is a number, not {_shown(value)}")
    if whole and value != int(value):
        raise PolicyError(f"{where}'s {name} is a whole number, not {value}")
    if value < 0:
        raise PolicyError(f"{where}'s {name} cannot be negative ({value})")
    return float(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


class Verdict(enum.StrEnum):
    HOLD = "hold"  # not enough evidence yet
    ADVANCE = "advance"  # on to the next step
    PROMOTE = "promote"  # the candidate becomes the stable version
    ROLLBACK = "rollback"  # the candidate leaves


@dataclasses.dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str  # the evidence it rests on, in a sentence
    interval: tuple[float, float] | None = None  # candidate - stable accuracy, always valid


def accuracy_interval(
    stable: Arm, candidate: Arm, *, alpha: float, tau: float
) -> tuple[float, float] | None:
    """An always-valid ``1 - alpha`` interval for the candidate's accuracy minus the
    stable version's; None until both arms have labels.

    The mixture test's boundary for a difference ``d`` with variance ``v``: the ratio
    ``sqrt(v / (v + tau²)) · exp(tau² d² / (2 v (v + tau²)))`` passes ``1 / alpha``
    exactly when ``|d|`` passes the half-width below. Each arm's accuracy is smoothed
    (a success and a failure added) for its variance, so an arm with every label right
    does not claim to know its accuracy exactly."""
    if not stable.labelled or not candidate.labelled:
        return None
    variance = _variance(stable) + _variance(candidate)
    t2 = tau * tau
    half = math.sqrt(
        variance
        * (variance + t2)
        / t2
        * (2 * math.log(1 / alpha) + math.log((variance + t2) / variance))
    )
    difference = candidate.correct / candidate.labelled - stable.correct / stable.labelled
    # a difference of accuracies lies in [-1, 1]: the interval says no more than that
    return max(difference - half, -1.0), min(difference + half, 1.0)


def decide(policy: Policy, step: int, windows: int, stable: Arm, candidate: Arm) -> Decision:
    """The verdict at the end of a window: ``step`` is the index of the current step,
    ``windows`` how many windows it has lasted, and the arms its evidence so far."""
    current = policy.steps[step]
    if policy.rollback_on_drift and candidate.drift_alarm:
        return Decision(Verdict.ROLLBACK, "the drift detector raised an alarm on the candidate")
    if policy.max_error_rate is not None and candidate.error_rate > policy.max_error_rate:
        return Decision(
            Verdict.ROLLBACK,
            f"the candidate failed {candidate.error_rate:.1%} of its records, over "
            f"{policy.max_error_rate:.1%}",
        )
    p99 = candidate.latency_p99_ms
    if (
        policy.max_latency_p99_ms is not None
        and p99 is not None
        and p99 > policy.max_latency_p99_ms
    ):
        return Decision(
            Verdict.ROLLBACK,
            f"the candidate's p99 latency {p99:.1f} ms is over {policy.max_latency_p99_ms:g} ms",
        )
    interval = accuracy_interval(stable, candidate, alpha=policy.alpha, tau=policy.tau)
    said = _said(interval, policy.alpha)
    if interval is not None and interval[1] < -policy.max_drop:
        return Decision(
            Verdict.ROLLBACK,
            f"the candidate is less accurate by more than {policy.max_drop:.1%}: {said}",
            interval,
        )
    missing = []
    if windows < current.windows:
        missing.append(f"{windows} of {current.windows} windows")
    if candidate.records < current.min_records:
        missing.append(f"{candidate.records} of {current.min_records} records")
    if candidate.labelled < current.min_labels:
        missing.append(f"{candidate.labelled} of {current.min_labels} labels")
    last = step == len(policy.steps) - 1
    if not missing and not last:
        return Decision(Verdict.ADVANCE, f"step {step + 1} showed what it needs", interval)
    if not missing and not policy.labels:
        return Decision(Verdict.PROMOTE, "the last step showed what it needs", interval)
    if not missing and interval is not None and interval[0] > -policy.margin:
        better = "better" if policy.margin == 0 else f"no worse than {policy.margin:.1%} below"
        return Decision(
            Verdict.PROMOTE, f"the candidate is {better} the stable version: {said}", interval
        )
    undecided = interval is None or interval[0] <= -policy.margin
    only_labels = all(m.endswith(" labels") for m in missing)  # nothing else is still to come
    if (
        policy.labels
        and policy.max_labels is not None
        and candidate.labelled >= policy.max_labels
        and undecided
        and only_labels
    ):
        return Decision(
            Verdict.ROLLBACK,
            f"no verdict on accuracy after {candidate.labelled} labels: {said}",
            interval,
        )
    if not missing:
        missing.append(
            f"an accuracy no worse than {policy.margin:.1%} below the stable version's ({said})"
        )
    return Decision(Verdict.HOLD, "waiting for " + ", ".join(missing), interval)


def _variance(arm: Arm) -> float:
    p = (arm.correct + 1) / (arm.labelled + 2)
    return p * (1 - p) / arm.labelled


def _said(interval: tuple[float, float] | None, alpha: float) -> str:
    if interval is None:
        return "no labels yet"
    low, high = interval
    return (
        f"candidate - stable accuracy in [{low:+.1%}, {high:+.1%}] ({1 - alpha:.0%}, always valid)"
    )
