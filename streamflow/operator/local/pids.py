"""Processes the local target did not start in this process: is one alive, and stopping it.

The CLI, the daemon and a foreground ``streamflow run`` each look at pids
another process recorded (``status.json``, ``daemon.json``,
``runtime.json``), so none of them can ``wait()`` on those processes: they
poll. This module is the one place that polls and signals them. (The
supervisor's own children are stopped through their ``Popen`` instead, in
``processes``: waiting on a child also reaps it, and its handle cannot
signal a reused pid.)

A zombie counts as *not* alive. It has exited and runs no code; only its
parent has yet to read its exit status, which for a recorded pid may be never
(its parent is gone and nothing reaps, as in a container without an init).
``os.kill(pid, 0)`` succeeds on a zombie, so before this module the copies of
this check disagreed: ``undeploy`` saw a zombie replica as stopped, the
daemon's shutdown and ``ensure_daemon`` as running, waiting out their whole
grace period for a process that could never exit further.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["alive", "mentions", "terminate", "wait_until"]

_POLL_S = 0.1  # how often a stop is checked: the processes are not our children
_PROC = Path("/proc")


def alive(pid: object) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has; see above).

    Anything but a positive int is no process: ``os.kill(0, ...)`` would
    address our own process group. A process of another user is alive.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _state(pid) not in ("Z", "X")  # a zombie, or gone since the signal


def mentions(pid: int, marker: str) -> bool | None:
    """Whether ``pid`` is alive with ``marker`` in its command line; None without ``/proc``.

    The marker (a path only that application's processes are given) tells a
    recorded pid that was reused by an unrelated process from ours.
    """
    if not _PROC.is_dir():
        return None
    try:
        cmdline = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in cmdline and alive(pid)


def terminate(
    pids: Sequence[int],
    *,
    grace: float,
    running: Callable[[int], bool] = alive,
    after_kill: float = 10.0,
) -> list[int]:
    """SIGTERM each pid, SIGKILL those still ``running`` after ``grace`` seconds.

    SIGTERM first because a replica commits its offsets on it. ``running``
    says whether a pid is still the process meant (by default: alive). The
    pids that had to be killed are returned, after waiting up to
    ``after_kill`` seconds for them to go.
    """
    _signal(pids, signal.SIGTERM)
    if wait_until(lambda: not any(running(pid) for pid in pids), timeout=grace):
        return []
    stubborn = [pid for pid in pids if running(pid)]
    _signal(stubborn, signal.SIGKILL)
    wait_until(lambda: not any(running(pid) for pid in stubborn), timeout=after_kill)
    return stubborn


def wait_until(condition: Callable[[], bool], *, timeout: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)  # polling processes and files that others change
    return True


def _signal(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _state(pid: int) -> str:
    """The state letter in ``/proc/<pid>/stat`` (``Z``: zombie, ``X``: dead), "" if unknown."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return "X" if _PROC.is_dir() else ""
    except OSError:
        return ""
    # the command name, in parentheses, may hold spaces and ")": split after the last one
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[0] if fields else ""
