"""Ending a `streamflow run` (or any CLI that owns processes) that a test started."""

from __future__ import annotations

import signal
import subprocess


def stop(process: subprocess.Popen[str], *, timeout: float = 60.0) -> None:
    """Ctrl-C, as a person would, and SIGKILL only when that does not end it in time.

    `streamflow run` stops its replicas and its embedded broker on SIGINT. They run in
    sessions of their own, so a SIGKILL alone leaves them running: a test that failed
    once left a broker and two replicas using the CPU for the rest of a CI run.
    """
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
