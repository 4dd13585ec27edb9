"""`streamflow run` in a process of its own, as a user runs it in a terminal.

A test starts it, waits on what its log shows (never on a fixed duration: a run
on a loaded 2-core machine can take a minute to load its model), then stops it
with Ctrl-C, which must end it cleanly. ``--for`` is a sleep, so a test that
asserts on a run's output does not use it.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests import stopping
from tests.waiting import exited, wait_until

STREAMFLOW = Path(sys.executable).with_name("streamflow")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class CliRun:
    """One `streamflow <args>` whose output (stdout and stderr) goes to ``log_file``."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        log_file: Path,
        cwd: Path | None = None,
        program: Path = STREAMFLOW,
    ) -> None:
        """``program``: another `streamflow` (one installed in a virtualenv of the test's)."""
        self.log_file = log_file
        with log_file.open("w") as out:
            self.process = subprocess.Popen(
                [str(program), *args],
                cwd=cwd,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def log(self) -> str:
        """What it printed so far, without colours."""
        return ANSI.sub("", self.log_file.read_text())

    def wait(self, condition: Callable[[str], object], *, what: str, timeout: float) -> None:
        """Until ``condition(log)`` holds; fails at once, with the log, if the run ends first."""
        wait_until(
            lambda: condition(self.log()),
            what=what,
            timeout=timeout,
            interval=0.5,  # polling a log file
            gave_up=exited(self.process, "streamflow run"),
            explain=lambda: self.log()[-6000:],
        )

    def interrupt(self, *, timeout: float = 60) -> str:
        """Ctrl-C, as in a terminal; the run must exit 0 within ``timeout``. Its whole log."""
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"streamflow run still running {timeout:g} s after Ctrl-C\n{self.stacks()}"
            ) from None
        assert code == 0, f"streamflow run exited {code}\n{self.log()[-6000:]}"
        return self.log()

    def stacks(self) -> str:
        """The log's tail after SIGUSR1, which makes streamflow print every thread's stack."""
        self.process.send_signal(signal.SIGUSR1)
        try:
            wait_until(
                lambda: "most recent call first" in self.log(),
                what="the stacks of streamflow run's threads",
                timeout=10,
            )
        except AssertionError as exc:
            return f"{exc}\n{self.log()[-6000:]}"
        return self.log()[-12000:]

    def close(self) -> None:
        """After a failed assertion: Ctrl-C, then SIGKILL, so no replica is left running."""
        stopping.stop(self.process)

    def __enter__(self) -> CliRun:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
