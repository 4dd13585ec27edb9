"""The autoscaling policy with made-up numbers: bounds, windows, rates, and no flapping."""

from __future__ import annotations

from streamflow.blueprint.model import AutoscaleSpec
from streamflow.operator.autoscale import Decision, History, Sample, decide

SPEC = AutoscaleSpec(min=1, max=8, target_lag=5000, scale_up_after=0, scale_down_after=120)


def step(
    spec: AutoscaleSpec,
    history: History,
    *,
    at: float,
    lag: int,
    produced: int = 0,
    consumed: int = 0,
    current: int,
    partitions: int = 8,
) -> tuple[Decision, History]:
    sample = Sample(at=at, lag=lag, produced=produced, consumed=consumed, partitions=partitions)
    return decide(spec, sample, history, current=current)


def test_a_backlog_scales_up_at_once_to_lag_over_target() -> None:
    decision, _ = step(SPEC, History(), at=0, lag=17_000, current=1)
    assert decision.replicas == 4 and decision.changed
    assert decision.reason.startswith("scaled up: lag 17000 (target 5000 per replica)")


def test_the_count_is_held_at_max_and_at_the_partitions() -> None:
    decision, _ = step(SPEC, History(), at=0, lag=200_000, current=1)
    assert decision.replicas == 8 and decision.wanted == 40
    assert "40 wanted, held at max 8" in decision.reason
    decision, _ = step(SPEC, History(), at=0, lag=200_000, current=1, partitions=3)
    assert decision.replicas == 3
    assert "held at the input's 3 partitions" in decision.reason


def test_min_is_kept_and_min_zero_wakes_up_on_any_lag() -> None:
    decision, _ = step(SPEC, History(), at=0, lag=0, current=0)
    assert decision.replicas == 1 and "outside the bounds" in decision.reason
    idle = AutoscaleSpec(min=0, max=4, target_lag=1000, scale_down_after=0)
    decision, _ = step(idle, History(), at=0, lag=3, current=0)
    assert decision.replicas == 1
    decision, _ = step(idle, History(), at=0, lag=0, current=1)
    assert decision.replicas == 0


def test_scale_up_waits_for_its_window_and_takes_the_lowest_wanted_in_it() -> None:
    spec = AutoscaleSpec(min=1, max=8, target_lag=1000, scale_up_after=30, scale_down_after=60)
    history = History()
    decision, history = step(spec, history, at=0, lag=6000, current=1)
    assert decision.replicas == 1 and decision.reason.startswith("waiting 30s more")
    decision, history = step(spec, history, at=15, lag=3000, current=1)
    assert decision.replicas == 1
    decision, history = step(spec, history, at=30, lag=8000, current=1)
    assert decision.replicas == 3  # the lowest wanted over the window: 3000 / 1000


def test_a_short_spike_does_not_scale_up_when_a_window_is_set() -> None:
    spec = AutoscaleSpec(min=1, max=8, target_lag=1000, scale_up_after=20, scale_down_after=60)
    history = History()
    for at, lag in ((0, 0), (10, 0), (20, 0), (25, 9000), (30, 0)):
        decision, history = step(spec, history, at=at, lag=lag, current=1)
        assert decision.replicas == 1, (at, decision.reason)


def test_scale_down_waits_the_whole_window_of_low_demand() -> None:
    history = History()
    decision, history = step(SPEC, history, at=0, lag=40_000, current=1)
    assert decision.replicas == 8
    for at in range(5, 125, 5):  # drained at once, nothing comes in
        decision, history = step(SPEC, history, at=at, lag=0, current=8)
        assert decision.replicas == 8, (at, decision.reason)
    decision, history = step(SPEC, history, at=125, lag=0, current=8)
    assert decision.replicas == 1 and decision.reason.startswith("scaled down")
    assert history.decisions == 2


def test_a_burst_is_one_step_up_and_one_step_down() -> None:
    """200k records into a streamlet whose replicas do 500 records/s each."""
    history, current, produced, consumed, changes = History(), 1, 200_000, 0, []
    drained_at = None
    for second in range(0, 1200, 5):
        lag = produced - consumed
        if lag == 0 and drained_at is None:
            drained_at = second
        decision, history = step(
            SPEC, history, at=second, lag=lag, produced=produced, consumed=consumed,
            current=current,
        )  # fmt: skip
        if decision.changed:
            changes.append((second, current, decision.replicas))
            current = decision.replicas
        consumed = min(produced, consumed + 500 * current * 5)
    assert changes[0] == (0, 1, 8), changes  # straight to max, in one decision
    downs = changes[1:]
    assert downs and all(new < old for _, old, new in downs), changes  # never up again
    assert len(downs) == 1 and current == 1, changes
    assert drained_at is not None
    assert drained_at + 115 <= downs[-1][0] <= drained_at + 120  # one window after the drain


def test_a_steady_stream_keeps_enough_replicas_and_does_not_flap() -> None:
    """Input at 1800 records/s; one replica does 500/s flat out."""
    spec = AutoscaleSpec(min=1, max=8, target_lag=2000, scale_down_after=30)
    history, current, produced, consumed, changes = History(), 1, 0, 0, []
    for second in range(0, 900, 5):
        produced += 1800 * 5
        consumed = min(produced, consumed + 500 * current * 5)
        decision, history = step(
            spec, history, at=second, lag=produced - consumed, produced=produced,
            consumed=consumed, current=current,
        )  # fmt: skip
        if decision.changed:
            changes.append((second, current, decision.replicas))
            current = decision.replicas
    # up once or twice while the backlog builds, then never down again: 4 keep up (1800/500)
    assert current >= 4
    assert all(new > old for _, old, new in changes), changes
    assert len(changes) <= 3, changes
    assert "needed to keep up" in decision.reason


def test_a_manual_count_outside_the_bounds_is_corrected() -> None:
    decision, _ = step(SPEC, History(), at=0, lag=0, current=12)
    assert decision.replicas == 8 and "outside the bounds [1, 8]" in decision.reason


def test_offsets_going_backwards_give_no_rate() -> None:
    _, history = step(SPEC, History(), at=0, lag=0, produced=100, consumed=100, current=1)
    decision, _ = step(SPEC, history, at=5, lag=0, produced=10, consumed=10, current=1)
    assert decision.rate_in is None and decision.rate_out is None


def test_a_noisy_low_demand_still_steps_down() -> None:
    spec = AutoscaleSpec(min=1, max=8, target_lag=1000, scale_down_after=20)
    history, current = History(), 8
    for at in range(0, 200, 5):  # wants 1 and 2 in turn, for ever
        decision, history = step(
            spec, history, at=at, lag=500 + 1000 * (at // 5 % 2), current=current
        )
        current = decision.replicas
    assert current == 2, decision.reason
