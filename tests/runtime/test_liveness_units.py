"""Liveness: a replica is live when it makes progress whenever it has work.

Time is a fake clock here; the real-broker test of the whole chain (a stuck
replica noticed, logged, killed and replaced) is in tests/operator.
"""

from __future__ import annotations

import logging
import threading

import httpx
import pytest

from streamflow.runtime.health import HealthServer, HealthState, LivenessWatch
from streamflow.runtime.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _state(clock: Clock, stall_after: float = 60.0) -> HealthState:
    return HealthState(stall_after=stall_after, clock=clock)


def test_before_the_first_turn_nothing_is_judged() -> None:
    clock = Clock()
    state = _state(clock)
    state.doing("loading the model")
    clock.now += 3600
    assert state.liveness().alive


def test_a_loop_stuck_in_one_step_is_not_live_and_says_which() -> None:
    clock = Clock()
    state = _state(clock)
    state.turned()
    state.doing("the streamlet's process")
    clock.now += 59
    assert state.liveness().alive
    clock.now += 2
    verdict = state.liveness()
    assert not verdict.alive
    assert verdict.reason == "stuck for 61s in the streamlet's process (stall_after 60s)"
    state.turned()
    assert state.liveness().alive


def test_records_waiting_and_none_taken_is_not_live_though_the_loop_turns() -> None:
    clock = Clock()
    state = _state(clock)
    state.turned()
    state.backlog(1200)
    for _ in range(61):
        clock.now += 1
        state.turned()  # consume returns nothing, turn after turn
    verdict = state.liveness()
    assert not verdict.alive
    assert verdict.reason.startswith("1200 records wait but none was taken for 61s")
    state.progressed()
    assert state.liveness().alive


def test_no_work_is_not_a_stall() -> None:
    clock = Clock()
    state = _state(clock)
    state.turned()
    state.backlog(0)
    for _ in range(600):
        clock.now += 1
        state.turned()
    assert state.liveness().alive


def test_catching_up_counts_as_progress() -> None:
    clock = Clock()
    state = _state(clock)
    state.turned()
    state.backlog(10)
    clock.now += 59
    state.backlog(0)  # the lag went to zero: whatever waited was taken
    clock.now += 30
    state.turned()
    state.backlog(5)  # new work just arrived
    assert state.liveness().alive


def test_healthz_answers_503_with_the_reason() -> None:
    clock = Clock()
    state = _state(clock, stall_after=10)
    server = HealthServer(state=state, metrics=Metrics(app="a", streamlet="s", replica=0))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/healthz"
        state.turned()
        assert httpx.get(url).json() == {"alive": True}
        state.doing("writing the batch's outputs and committing it")
        clock.now += 11
        answer = httpx.get(url)
        assert answer.status_code == 503
        assert answer.json() == {
            "alive": False,
            "reason": "stuck for 11s in writing the batch's outputs and committing it "
            "(stall_after 10s)",
        }
    finally:
        server.stop()


def test_the_watch_logs_once_with_where_the_loop_is_then_once_when_live(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    state = _state(clock, stall_after=10)
    entered, release = threading.Event(), threading.Event()

    def stuck_in_user_logic() -> None:
        state.turned()
        state.doing("the streamlet's process")
        entered.set()
        release.wait(30)

    loop = threading.Thread(target=stuck_in_user_logic)
    loop.start()
    try:
        entered.wait(10)
        watch = LivenessWatch(state, thread_id=loop.ident)
        with caplog.at_level(logging.INFO, logger="streamflow.runtime.health"):
            watch.check()
            clock.now += 11
            watch.check()
            watch.check()  # still stuck: said once
            failures = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert len(failures) == 1
            message = failures[0].getMessage()
            assert "not live: stuck for 11s in the streamlet's process" in message
            assert "stuck_in_user_logic" in message  # the stack shows where
            state.turned()
            watch.check()
        assert [r.getMessage() for r in caplog.records][-1] == "live again (progressing)"
    finally:
        release.set()
        loop.join()
