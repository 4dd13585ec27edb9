"""Progress on work a command waits for: a live spinner for people, plain lines for logs.

Every command that waits (deploy, scale, configure, undeploy, model push, the
embedded broker of ``run``, the benchmark suite) goes through :func:`waiting`,
so a wait looks the same everywhere and behaves the same for a script. The
mode is chosen once, when the wait begins, and never switches halfway:

* **live**: stderr is an interactive terminal. A spinner names what is awaited,
  how far it got and for how long, redrawn in place; it disappears when the wait
  ends, and :meth:`Waiting.done` leaves one line with the outcome.
* **lines**: stderr is not a terminal, ``TERM=dumb``, ``$CI`` is set, or the
  command writes JSON or YAML. One plain line on stderr each time the detail
  *changes*, never one per poll, so a two-minute wait in a CI log is a handful
  of lines; no ANSI codes, and nothing ever on stdout, which belongs to the data.
* **quiet**: ``--quiet``. Nothing at all; errors are still reported by the caller.

The clock is a parameter, so tests fake time instead of sleeping.
"""

from __future__ import annotations

import contextlib
import enum
import os
import time
from collections.abc import Callable, Iterator

from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from streamflow.cli import output

__all__ = ["Mode", "Waiting", "choose_mode", "elapsed_text", "waiting"]

Clock = Callable[[], float]


class Mode(enum.Enum):
    LIVE = "live"
    LINES = "lines"
    QUIET = "quiet"


def choose_mode(console: Console, *, machine_output: bool = False, quiet: bool = False) -> Mode:
    """How to show a wait on ``console``; ``machine_output``: the command prints JSON or YAML."""
    if quiet:
        return Mode.QUIET
    in_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    if machine_output or in_ci or not console.is_terminal or console.is_dumb_terminal:
        return Mode.LINES
    return Mode.LIVE


def elapsed_text(seconds: float) -> str:
    """``7s``, ``2m05s``, ``1h02m``: short enough to sit at the end of a status line."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class Waiting:
    """One wait in progress: :meth:`update` says how far it got, :meth:`done` how it ended."""

    def __init__(
        self,
        what: str,
        *,
        console: Console,
        mode: Mode,
        clock: Clock,
        since: float | None = None,
        separator: str = ": ",
    ) -> None:
        self.what = what
        self.separator = separator
        self.mode = mode
        self.detail = ""
        self._console = console
        self._clock = clock
        self._started = clock() if since is None else since
        self._live: Live | None = None
        self._spinner = Spinner("dots", style="cyan")
        self._finished = False

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    def update(self, detail: str) -> None:
        """Say how far the wait got; a line is written only when ``detail`` changed."""
        if self._finished or detail == self.detail:
            return
        self.detail = detail
        if self.mode is Mode.LINES:
            self._line(f"{self._headline()} [{elapsed_text(self.elapsed)}]")
        elif self._live is not None:
            self._live.refresh()

    def done(self, outcome: str) -> None:
        """End the wait with one line: ``outcome in 12s``. Later updates are ignored."""
        if self._finished:
            return
        self._finished = True
        self._stop_live()
        took = f" in {elapsed_text(self.elapsed)}"
        if self.mode is Mode.LINES:
            self._line(outcome + took)
        elif self.mode is Mode.LIVE:
            mark = "✓ " if self._console.encoding.lower().startswith("utf") else ""
            self._console.print(Text.assemble((mark, "green"), outcome, (took, "dim")))

    def __rich__(self) -> RenderableType:
        """What the live display draws at each refresh: the elapsed time moves on its own."""
        self._spinner.update(
            text=Text.assemble(self._headline(), (f"  {elapsed_text(self.elapsed)}", "dim"))
        )
        return self._spinner

    def _headline(self) -> str:
        return f"{self.what}{self.separator}{self.detail}" if self.detail else f"{self.what}…"

    def _line(self, text: str) -> None:
        # Straight to the file: a plain line can never pick up styles, markup or wrapping.
        self._console.file.write(text + "\n")
        self._console.file.flush()

    def _start(self) -> None:
        if self.mode is Mode.LINES:
            self._line(f"{self._headline()} [{elapsed_text(self.elapsed)}]")
        elif self.mode is Mode.LIVE:
            # stderr only: redirecting stdout would move a command's data onto stderr.
            self._live = Live(
                self,
                console=self._console,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
                redirect_stderr=True,
            )
            self._live.start(refresh=True)

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


@contextlib.contextmanager
def waiting(
    what: str,
    *,
    detail: str = "",
    since: float | None = None,
    separator: str = ": ",
    console: Console | None = None,
    machine_output: bool = False,
    quiet: bool = False,
    clock: Clock = time.monotonic,
) -> Iterator[Waiting]:
    """Show progress on stderr while the block waits for ``what`` (e.g. ``deploying wine``).

    ``since``: a reading of ``clock`` from which to count the elapsed time (default:
    now); ``separator`` goes between ``what`` and the detail. The live display is
    gone when the block exits, however it exits, so an error message that follows
    is never drawn over.
    """
    console = console or output.error_console()
    mode = choose_mode(console, machine_output=machine_output, quiet=quiet)
    wait = Waiting(what, console=console, mode=mode, clock=clock, since=since, separator=separator)
    wait.detail = detail
    wait._start()
    try:
        yield wait
    finally:
        wait._stop_live()
