"""``pids``: the one check that a recorded process is alive, and the one way to stop it.

Real child processes, no fakes: the point is what ``/proc`` and the kernel say.
Each test waits on a condition (a line from the child, a state in ``/proc``),
never for a fixed time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamflow.operator.local import pids

pytestmark = pytest.mark.timeout(60)

_PROC = Path("/proc")


def _child(code: str, *argv: str) -> subprocess.Popen[str]:
    """A Python child that prints ``ready`` once ``code`` has run, then sleeps."""
    program = f"import signal, sys, time\n{code}\nprint('ready', flush=True)\ntime.sleep(120)"
    child = subprocess.Popen(
        [sys.executable, "-c", program, *argv], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"  # waits for the child, not a clock
    return child


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()


def _state(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def test_a_running_child_is_alive(children: list[subprocess.Popen[str]]) -> None:
    child = _child("")
    children.append(child)
    assert pids.alive(child.pid)


def test_nothing_but_a_positive_pid_is_a_process() -> None:
    assert not pids.alive(None)
    assert not pids.alive("1")
    assert not pids.alive(0)  # os.kill(0, ...) would be our own process group
    assert not pids.alive(-1)
    assert not pids.alive(True)


@pytest.mark.skipif(not _PROC.is_dir(), reason="zombies are read from /proc")
def test_a_zombie_is_not_alive(children: list[subprocess.Popen[str]]) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # not reaped yet: the kernel keeps it as a zombie, and os.kill(pid, 0) still succeeds
        assert pids.wait_until(lambda: _state(child.pid) == "Z", timeout=30)
        os.kill(child.pid, 0)
        assert not pids.alive(child.pid)
    finally:
        child.wait(timeout=10)


def test_a_reaped_child_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    assert not pids.alive(child.pid)


def test_terminate_stops_a_child_with_sigterm(children: list[subprocess.Popen[str]]) -> None:
    child = _child("")
    children.append(child)
    assert pids.terminate([child.pid], grace=30) == []
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_terminate_kills_a_child_that_ignores_sigterm(
    children: list[subprocess.Popen[str]],
) -> None:
    child = _child("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    children.append(child)
    assert pids.terminate([child.pid], grace=0.5) == [child.pid]
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_terminate_leaves_alone_what_is_no_longer_the_process_meant(
    children: list[subprocess.Popen[str]],
) -> None:
    child = _child("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    children.append(child)
    assert pids.terminate([child.pid], grace=30, running=lambda pid: False) == []
    assert child.poll() is None  # SIGTERM ignored, and no SIGKILL followed


@pytest.mark.skipif(not _PROC.is_dir(), reason="command lines are read from /proc")
def test_mentions_reads_the_command_line(children: list[subprocess.Popen[str]]) -> None:
    child = _child("", "--app-spec", "/home/x/apps/shop/applied.json")
    children.append(child)
    assert pids.mentions(child.pid, "/apps/shop/applied.json") is True
    assert pids.mentions(child.pid, "/apps/other/applied.json") is False
    child.kill()
    child.wait(timeout=10)
    assert pids.mentions(child.pid, "/apps/shop/applied.json") is False
