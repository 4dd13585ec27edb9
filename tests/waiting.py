"""Waiting in tests: poll a condition until it holds, and fail saying what never came.

One loop for every test that waits on something outside it (a replica, a pod, a
log line, a process): it asks ``condition`` again every ``interval`` seconds, and
the test goes on the moment the condition holds. Time passing is never the
assertion: past ``timeout`` the wait fails with an :class:`AssertionError` that
names what it waited for and for how long (so a ``try``/``except AssertionError``
around a wait can add what it knows), followed by what ``explain`` says, a log
tail say. ``gave_up`` ends a wait early with its own reason, when what was
waited on can no longer come (the process that would bring it has exited).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    *,
    what: str,
    timeout: float,
    interval: float = 0.1,
    explain: Callable[[], str] | None = None,
    gave_up: Callable[[], str | None] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy; that value.

    Fails with ``timed out after <timeout> s waiting for <what>`` past ``timeout``,
    or with ``<reason> before <what>`` as soon as ``gave_up`` returns a reason;
    either way followed by what ``explain()`` says (when given, and not empty) on lines
    of its own.
    """
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        reason = gave_up() if gave_up is not None else None
        if reason:
            _fail(f"{reason} before {what}", explain)
        if time.monotonic() > deadline:
            _fail(f"timed out after {timeout:g} s waiting for {what}", explain)
        time.sleep(interval)  # a polling interval, not a synchronisation
    return result


def exited(process: subprocess.Popen[Any], name: str) -> Callable[[], str | None]:
    """For ``gave_up``: ``<name> exited (<code>)`` once ``process`` has ended, else None."""

    def check() -> str | None:
        code = process.poll()
        return None if code is None else f"{name} exited ({code})"

    return check


def _fail(message: str, explain: Callable[[], str] | None) -> NoReturn:
    detail = explain() if explain is not None else ""
    raise AssertionError(f"{message}\n{detail}" if detail else message) from None
