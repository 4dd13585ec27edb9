"""A rollout's verdicts: a known rate of false promotions however often the evidence is read,
and a worse candidate rolled back within a stated number of labels (pure policy code)."""

from __future__ import annotations

import numpy as np
import pytest

from streamflow.models.rollout import RolloutMode
from streamflow.models.rollout_policy import (
    Arm,
    Policy,
    Step,
    Verdict,
    accuracy_interval,
    decide,
)

pytestmark = pytest.mark.unit

CANARY = Step(RolloutMode.CANARY, share=25.0)
ROLLOUTS = 1000
WINDOW = 100  # labels per arm and window
WINDOWS = 60


def _simulate(
    stable_accuracy: float, candidate_accuracy: float, policy: Policy, seed: int
) -> list[tuple[Verdict, int]]:
    """Each seeded rollout's verdict and the candidate's labels by then: the evidence
    read after every window, as the controller reads it."""
    rng = np.random.default_rng(seed)
    stable = rng.binomial(WINDOW, stable_accuracy, size=(ROLLOUTS, WINDOWS)).cumsum(axis=1)
    candidate = rng.binomial(WINDOW, candidate_accuracy, size=(ROLLOUTS, WINDOWS)).cumsum(axis=1)
    ended = []
    for run in range(ROLLOUTS):
        verdict, labels = Verdict.HOLD, 0
        for window in range(WINDOWS):
            labels = (window + 1) * WINDOW
            decision = decide(
                policy,
                0,
                window + 1,
                Arm(labelled=labels, correct=int(stable[run, window])),
                Arm(labelled=labels, correct=int(candidate[run, window])),
            )
            verdict = decision.verdict
            if verdict in (Verdict.PROMOTE, Verdict.ROLLBACK):
                break
        ended.append((verdict, labels))
    return ended


def test_a_candidate_no_better_is_promoted_at_most_at_alpha_however_often_it_is_read() -> None:
    policy = Policy(steps=(CANARY,), alpha=0.05)
    for seed, accuracy in ((1, 0.85), (2, 0.85), (3, 0.84)):  # as good, and a point worse
        ended = _simulate(0.85, accuracy, policy, seed)
        promoted = sum(verdict is Verdict.PROMOTE for verdict, _ in ended) / ROLLOUTS
        assert promoted <= policy.alpha, (accuracy, promoted)


def test_a_naive_test_read_after_every_window_promotes_far_more_often() -> None:
    # the same rollouts, with a fixed-sample 95% interval read after every window: what
    # the always-valid interval protects against
    rng = np.random.default_rng(1)
    stable = rng.binomial(WINDOW, 0.85, size=(ROLLOUTS, WINDOWS)).cumsum(axis=1)
    candidate = rng.binomial(WINDOW, 0.85, size=(ROLLOUTS, WINDOWS)).cumsum(axis=1)
    n = np.arange(1, WINDOWS + 1) * WINDOW
    difference = (candidate - stable) / n
    spread = np.sqrt(
        (stable / n) * (1 - stable / n) / n + (candidate / n) * (1 - candidate / n) / n
    )
    assert ((difference - 1.96 * spread) > 0).any(axis=1).mean() > 0.1


def test_a_candidate_five_points_worse_is_rolled_back_within_the_stated_labels() -> None:
    ended = _simulate(0.85, 0.80, Policy(steps=(CANARY,), alpha=0.05), seed=4)
    assert all(verdict is Verdict.ROLLBACK for verdict, _ in ended)
    labels = np.array([n for _, n in ended])
    # the figures the module's docstring states
    assert np.median(labels) <= 1100 and np.percentile(labels, 95) <= 2700


def test_a_better_candidate_is_promoted() -> None:
    ended = _simulate(0.85, 0.90, Policy(steps=(CANARY,), alpha=0.05), seed=5)
    assert sum(verdict is Verdict.PROMOTE for verdict, _ in ended) / ROLLOUTS > 0.95


def test_the_steps_advance_on_their_minimums_then_promotion_waits_for_the_evidence() -> None:
    policy = Policy(
        steps=(
            Step(RolloutMode.SHADOW, windows=2, min_records=100),
            Step(RolloutMode.CANARY, share=5.0, min_labels=50),
        ),
        max_labels=5000,
    )
    even = Arm(records=500, labelled=400, correct=340)
    early = decide(policy, 0, 1, even, Arm(records=500))
    assert early.verdict is Verdict.HOLD and "1 of 2 windows" in early.reason
    assert decide(policy, 0, 2, even, Arm(records=500)).verdict is Verdict.ADVANCE
    few = decide(policy, 1, 1, even, Arm(records=80, labelled=10, correct=9))
    assert few.verdict is Verdict.HOLD and "10 of 50 labels" in few.reason
    unsure = decide(policy, 1, 3, even, Arm(records=500, labelled=400, correct=342))
    assert unsure.verdict is Verdict.HOLD and "no worse than" in unsure.reason
    assert unsure.interval is not None and unsure.interval[0] < 0 < unsure.interval[1]
    gave_up = decide(
        policy, 1, 9, Arm(labelled=5000, correct=4250), Arm(labelled=5000, correct=4255)
    )
    assert (
        gave_up.verdict is Verdict.ROLLBACK
        and "no verdict on accuracy after 5000" in gave_up.reason
    )


def test_max_labels_gives_up_only_on_an_undecided_candidate_with_nothing_else_to_wait_for() -> None:
    policy = Policy(steps=(Step(RolloutMode.CANARY, share=10.0, windows=24),), max_labels=2000)
    stable, better = Arm(labelled=2000, correct=1700), Arm(labelled=2000, correct=1900)
    early = decide(policy, 0, 5, stable, better)  # clearly better, the step not over yet
    assert early.verdict is Verdict.HOLD and "5 of 24 windows" in early.reason
    assert decide(policy, 0, 24, stable, better).verdict is Verdict.PROMOTE
    shadow_first = Policy(steps=(Step(RolloutMode.SHADOW, windows=3), CANARY), max_labels=100)
    assert decide(shadow_first, 0, 1, stable, better).verdict is Verdict.HOLD
    no_labels = Policy(steps=(CANARY,), labels=False, max_labels=10)
    assert decide(no_labels, 0, 1, Arm(records=10), Arm(records=10)).verdict is Verdict.PROMOTE


def test_counts_that_are_not_evidence_are_refused() -> None:
    with pytest.raises(ValueError, match="2 right of 1 labelled"):
        Arm(labelled=1, correct=2)
    with pytest.raises(ValueError, match="not evidence"):
        Arm(records=-1)
    with pytest.raises(ValueError, match="past max_labels 100"):
        Policy(steps=(Step(RolloutMode.CANARY, min_labels=500),), max_labels=100)


def test_guardrails_roll_back_whatever_the_accuracy() -> None:
    policy = Policy(steps=(CANARY,), max_error_rate=0.01, max_latency_p99_ms=50)
    stable = Arm(records=1000, labelled=500, correct=400)
    failing = decide(policy, 0, 1, stable, Arm(records=980, failures=20))
    assert failing.verdict is Verdict.ROLLBACK and "failed 2.0% of its records" in failing.reason
    slow = decide(policy, 0, 1, stable, Arm(records=1000, latency_p99_ms=80.0))
    assert slow.verdict is Verdict.ROLLBACK and "p99 latency 80.0 ms" in slow.reason
    drifting = decide(policy, 0, 1, stable, Arm(records=1000, drift_alarm=True))
    assert drifting.verdict is Verdict.ROLLBACK and "drift" in drifting.reason
    worse = decide(policy, 0, 1, Arm(labelled=4000, correct=3400), Arm(labelled=4000, correct=3000))
    assert worse.verdict is Verdict.ROLLBACK and "less accurate" in worse.reason


def test_the_interval_narrows_with_labels_and_waits_for_both_arms() -> None:
    assert accuracy_interval(Arm(), Arm(labelled=10, correct=9), alpha=0.05, tau=0.05) is None
    widths = []
    for n in (100, 1000, 10_000):
        low, high = accuracy_interval(
            Arm(labelled=n, correct=int(0.8 * n)),
            Arm(labelled=n, correct=int(0.8 * n)),
            alpha=0.05,
            tau=0.05,
        ) or (0.0, 0.0)
        assert low < 0 < high
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    # every label right on both arms still leaves an interval, not a certainty
    low, high = accuracy_interval(
        Arm(labelled=50, correct=50), Arm(labelled=50, correct=50), alpha=0.05, tau=0.05
    ) or (0, 0)
    assert low < 0 < high


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"steps": ()}, "at least one step"),
        ({"steps": (CANARY,), "alpha": 1.5}, "alpha 1.5"),
        ({"steps": (Step(RolloutMode.AB, share=5.0),)}, "a shadow or a canary"),
        ({"steps": (Step(RolloutMode.CANARY, share=150.0),)}, "is not a percent"),
        ({"steps": (Step(RolloutMode.CANARY, windows=0),)}, "at least one window"),
    ],
)
def test_a_policy_out_of_its_bounds_is_refused(policy: dict, problem: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=problem):
        Policy(**policy)
