"""What the devkit's local services share: finding their files, reading logs, stopping.

Kafka, the model server and the control plane are each a process (or a few)
started from files that the project's set-up scripts put under ``tools/``.
They are found the same way (an argument, an environment variable, or the
``tools/`` folder searched upwards from the working directory and from this
package), and stopped the same way (wake a paused process, SIGTERM, a grace
period, then SIGKILL), and pick their ports the same way (:func:`free_ports`). Each
is a :class:`LocalService`: ``with`` starts and stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = [
    "LOOPBACK",
    "DevkitError",
    "LocalService",
    "find_upwards",
    "free_ports",
    "tail",
    "terminate",
]

LOOPBACK = "127.0.0.1"


class DevkitError(RuntimeError):
    """The development Kafka (or another local service) could not be found, fetched,
    started or reached."""


class LocalService:
    """A server this process starts and stops; ``with service:`` starts it with its
    default timeout and stops it on the way out, whatever happened inside."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def find_upwards(relative: str | Path, *, marker: str = "") -> Path | None:
    """``relative`` (holding ``marker``, if given) above the working directory or this package."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            candidate = folder / relative
            if (candidate / marker).exists() if marker else candidate.is_dir():
                return candidate
    return None


def tail(path: Path, *, lines: int = 30) -> str:
    """The last lines of a log file, headed by its name; empty when there are none."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    last = "\n".join(text.splitlines()[-lines:])
    return f"--- {path.name} (last {lines} lines) ---\n{last}" if last else ""


def terminate(process: subprocess.Popen[bytes] | None, *, grace: float) -> None:
    """Stop a process: SIGTERM and ``grace`` seconds to exit, then SIGKILL; idempotent."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
        if grace > 0:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
                return
        process.kill()
    process.wait()


def free_ports(count: int = 1, *, hosts: Sequence[str] = ()) -> tuple[int, ...]:
    """Ports free now: one per address in ``hosts``, else ``count`` on loopback.

    Every socket stays bound until all are read, so the ports differ from each other
    (a port picked and released may be handed out again by the next ``bind``).
    """
    addresses = list(hosts) or [LOOPBACK] * count
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in addresses]
        for probe, address in zip(probes, addresses, strict=True):
            probe.bind((address, 0))
        return tuple(int(probe.getsockname()[1]) for probe in probes)
