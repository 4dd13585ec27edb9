"""How a download shows its progress: a bar on a terminal, two plain lines elsewhere.

The devkit cannot use the CLI's progress helpers (it stands below the CLI), and
a fetch is the one wait in it whose length is known in bytes, so it has its
own small reporter: a rich progress bar when stderr is an interactive
terminal, else one line when it begins and one when it ends (a CI log gets
no redraws and no ANSI codes), or nothing at all. ``advance`` may be called
from several download threads at once.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgress

__all__ = ["Bar", "Lines", "Progress", "Silent", "for_console", "for_stderr"]


class Progress(Protocol):
    def begin(self, what: str, *, total: int) -> None: ...

    def advance(self, count: int) -> None: ...

    def end(self, *, ok: bool) -> None: ...


class Silent:
    def begin(self, what: str, *, total: int) -> None:
        pass

    def advance(self, count: int) -> None:
        pass

    def end(self, *, ok: bool) -> None:
        pass


class Lines:
    """A line when the download begins and one when it ends, on ``console``."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._lock = threading.Lock()
        self._done = 0
        self._total = 0
        self._started = 0.0

    def begin(self, what: str, *, total: int) -> None:
        self._total, self._started = total, time.monotonic()
        self._console.print(f"{what} ({_megabytes(total)})…", markup=False, highlight=False)

    def advance(self, count: int) -> None:
        with self._lock:
            self._done += count

    def end(self, *, ok: bool) -> None:
        took = time.monotonic() - self._started
        outcome = "fetched" if ok else "stopped after"
        self._console.print(
            f"{outcome} {_megabytes(self._done)} of {_megabytes(self._total)} in {took:.0f} s",
            markup=False,
            highlight=False,
        )


class Bar:
    """rich's progress bar: bytes, speed and time left, redrawn in place."""

    def __init__(self, console: Console) -> None:
        self._progress = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task("", total=0)

    def begin(self, what: str, *, total: int) -> None:
        self._progress.console.print(what, markup=False, highlight=False)
        self._progress.update(self._task, description="Apache Kafka jars", total=total)
        self._progress.start()

    def advance(self, count: int) -> None:
        self._progress.advance(self._task, count)

    def end(self, *, ok: bool) -> None:
        self._progress.stop()


def for_console(console: Console, *, quiet: bool = False) -> Progress:
    """The reporter that suits ``console``: a bar on a terminal (not in CI), else lines."""
    if quiet:
        return Silent()
    in_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    if console.is_terminal and not console.is_dumb_terminal and not in_ci:
        return Bar(console)
    return Lines(console)


def for_stderr() -> Progress:
    """For a fetch no caller shows: on this process's stderr."""
    return for_console(Console(file=sys.stderr, highlight=False))


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
