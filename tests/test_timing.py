"""The CPU column of the time table (`tests/timing.py`): a phase gets what its processes used then.

Each test drives the worker's meter through its hooks, one phase at a time, as pytest
does: the phase runs, then its report is made and given the phase's CPU seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from tests.timing import CPU_PROPERTY, CpuMeter
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="live processes are read from /proc"
)

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.3: pass\n"
BURN_AND_WAIT = BURN + "print('burnt', flush=True)\ntime.sleep(60)\n"  # until killed
# Uses 0.3 CPU seconds at each line read, says so, and ends at the end of its input.
BURNER = """
import sys, time
for line in sys.stdin:
    start = time.process_time()
    while time.process_time() - start < 0.3: pass
    print("burnt", flush=True)
"""
# At each line read, runs a child that uses 0.3 CPU seconds and waits for it: the
# child's seconds are then its parent's, not yet ours.
PARENT = f"""
import subprocess, sys
for line in sys.stdin:
    subprocess.run([sys.executable, "-c", {BURN!r}], check=True)
    print("burnt", flush=True)
"""
# Runs a child that uses 0.3 CPU seconds and then waits to be killed, and says its
# pid; ignoring SIGCHLD, it lets the kernel reap the child, whose seconds then
# reach no one: as when a process leaves the tree and is reaped outside it.
IGNORER = f"""
import signal, subprocess, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
child = {BURN_AND_WAIT!r}
print(subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.DEVNULL).pid, flush=True)
sys.stdin.read()
"""


def phase(meter: CpuMeter, action: Callable[[], object]) -> float:
    """The CPU seconds the meter reports for a phase that does `action`."""
    for _ in meter.pytest_runtest_call():
        action()
    reporting = meter.pytest_runtest_makereport()
    next(reporting)
    report = cast(pytest.TestReport, SimpleNamespace(user_properties=[]))
    with pytest.raises(StopIteration):
        reporting.send(report)
    return float(dict(report.user_properties)[CPU_PROPERTY])


def started(script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def burn(process: subprocess.Popen[str]) -> None:
    assert process.stdin and process.stdout
    process.stdin.write("go\n")
    process.stdin.flush()
    assert process.stdout.readline() == "burnt\n"


def end(process: subprocess.Popen[str]) -> None:
    assert process.stdin
    process.stdin.close()
    assert process.wait(10) == 0


def test_a_child_counts_in_the_phase_it_burns_in_not_the_one_that_waits_for_it() -> None:
    meter = CpuMeter()
    child = started(BURNER)  # as a module's fixture starts a server: before the phases
    try:
        assert phase(meter, lambda: burn(child)) >= 0.25
        assert phase(meter, lambda: None) < 0.1
        assert phase(meter, lambda: burn(child)) >= 0.25
        assert phase(meter, lambda: end(child)) < 0.1
    finally:
        child.kill()
        child.wait()


def test_a_grandchild_counts_in_the_phase_its_parent_waits_for_it_in() -> None:
    meter = CpuMeter()
    parent = started(PARENT)
    try:
        assert phase(meter, lambda: burn(parent)) >= 0.25
        assert phase(meter, lambda: end(parent)) < 0.1
    finally:
        parent.kill()
        parent.wait()


def test_a_process_reaped_where_it_is_not_counted_never_makes_a_phase_negative() -> None:
    meter = CpuMeter()
    ignorer = started(IGNORER)
    assert ignorer.stdout
    child = int(ignorer.stdout.readline())
    try:
        assert ignorer.stdout.readline() == "burnt\n"  # the child, alive, has used 0.3 s

        def kill_the_child() -> None:
            os.kill(child, signal.SIGKILL)
            wait_until(lambda: not Path(f"/proc/{child}").exists(), what="the reap", timeout=5)

        assert 0 <= phase(meter, kill_the_child) < 0.1
        end(ignorer)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        ignorer.kill()
        ignorer.wait()
