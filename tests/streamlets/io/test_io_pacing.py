"""Rate limiting on a fake clock: no drift, batched sleeps, no flood after a stall."""

from __future__ import annotations

import itertools

import pytest

from streamflow.streamlets.io._pacing import Pacer


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds


def run(pacer: Pacer, clock: FakeClock, records: int, *, work: float = 0.0) -> list[float]:
    """The times at which ``records`` records leave, each taking ``work`` seconds to make."""
    times = []
    for _ in range(records):
        pacer.wait()
        times.append(clock.now)
        clock.now += work
    return times


def test_rate_zero_never_sleeps() -> None:
    clock = FakeClock()
    run(Pacer(rate=0, clock=clock, sleep=clock.sleep), clock, 1000)
    assert clock.sleeps == []


def test_slow_rate_spaces_records_without_drift() -> None:
    clock = FakeClock()
    times = run(Pacer(rate=2.0, clock=clock, sleep=clock.sleep), clock, 101, work=0.1)
    # Time spent producing a record is absorbed by the schedule, not added to it.
    assert times[-1] - times[0] == pytest.approx(50.0)
    assert all(b - a == pytest.approx(0.5) for a, b in itertools.pairwise(times))


def test_fast_rate_sleeps_in_batches() -> None:
    clock = FakeClock()
    times = run(Pacer(rate=10_000, clock=clock, sleep=clock.sleep, min_sleep=0.005), clock, 10_001)
    assert times[-1] - times[0] == pytest.approx(1.0, abs=0.006)
    assert 150 <= len(clock.sleeps) <= 250  # about one sleep per 50 records, not 10,000


def test_a_stall_restarts_the_schedule_instead_of_flooding() -> None:
    clock = FakeClock()
    pacer = Pacer(rate=10.0, clock=clock, sleep=clock.sleep, max_lag=1.0)
    run(pacer, clock, 10)
    clock.now += 30.0  # held up for 30 s (Kafka pushing back)
    times = run(pacer, clock, 11)
    assert times[-1] - times[0] == pytest.approx(1.0)


def test_a_small_lag_is_caught_up() -> None:
    clock = FakeClock()
    pacer = Pacer(rate=10.0, clock=clock, sleep=clock.sleep, max_lag=1.0)
    start = run(pacer, clock, 10)[0]
    clock.now += 0.5  # late by less than max_lag: keep the schedule
    times = run(pacer, clock, 11)
    assert times[:5] == pytest.approx(
        [start + 1.4] * 5
    )  # the four records that fell due go out at once
    assert times[-1] == pytest.approx(start + 2.0)  # and the schedule is back on time


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        Pacer(rate=-1)
