"""The tests' one polling loop (`tests/waiting.py`): what it returns, how it fails."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.waiting import exited, wait_until


def test_it_returns_the_conditions_first_truthy_value() -> None:
    answers: Iterator[object] = iter([None, [], {"ready": True}])
    assert wait_until(lambda: next(answers), what="an answer", timeout=5, interval=0) == {
        "ready": True
    }


def test_it_goes_on_the_moment_the_condition_holds() -> None:
    start = time.monotonic()
    assert wait_until(lambda: 1, what="nothing", timeout=60, interval=30) == 1
    assert time.monotonic() - start < 5  # neither the interval nor the timeout was slept


def test_past_the_timeout_it_names_what_it_waited_for_and_how_long() -> None:
    calls = 0

    def never() -> bool:
        nonlocal calls
        calls += 1
        return False

    with pytest.raises(AssertionError) as failed:
        wait_until(never, what="the pod to run", timeout=0.3, interval=0.01)
    assert str(failed.value) == "timed out after 0.3 s waiting for the pod to run"
    assert calls > 1  # asked again and again, not once after a sleep


def test_explain_is_added_to_the_failure() -> None:
    with pytest.raises(AssertionError) as failed:
        wait_until(lambda: False, what="a line", timeout=0, explain=lambda: "the log's tail")
    assert str(failed.value) == "timed out after 0 s waiting for a line\nthe log's tail"
    with pytest.raises(AssertionError) as failed:
        wait_until(lambda: False, what="a line", timeout=0, explain=lambda: "")
    assert str(failed.value) == "timed out after 0 s waiting for a line"  # nothing to add


def test_gave_up_ends_the_wait_at_once_with_its_reason() -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], text=True)
    process.wait()
    start = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        wait_until(
            lambda: False,
            what="the records",
            timeout=60,
            gave_up=exited(process, "streamflow run"),
            explain=lambda: "its log",
        )
    assert str(failed.value) == "streamflow run exited (3) before the records\nits log"
    assert time.monotonic() - start < 5


def test_a_running_process_has_not_given_up() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
    try:
        assert exited(process, "it")() is None
    finally:
        process.kill()
        process.wait()
