"""A benchmark child process whose ``BENCH`` report lines arrive on a queue.

Every competitor, load generator and probe runs as its own process, as it would be
deployed: its own interpreter, its own GIL, its own librdkafka threads. The driver
only reads their report lines (see :mod:`bench.common`) and their CPU from /proc.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import common


class Child:
    """One child process: ``python argv...`` with stdout parsed for report lines."""

    def __init__(self, argv: list[str], log: Path, *, python: str = sys.executable) -> None:
        self.log = log
        self._log_file = log.open("w")
        self.process = subprocess.Popen(
            [python, *argv],
            cwd=common.REPO,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
        )
        self.reports: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            report = common.parse_report(line)
            if report is not None:
                self.reports.put(report)

    def expect(self, event: str, timeout: float) -> dict[str, Any]:
        """The next report named ``event``; earlier reports of other names are dropped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                report = self.reports.get(timeout=0.2)
            except queue.Empty:
                continue
            if report["event"] == event:
                return report
        raise RuntimeError(f"no {event!r} report within {timeout:.0f} s{self.tail()}")

    def drain(self) -> list[dict[str, Any]]:
        """Every report that has arrived and was not yet taken."""
        taken = []
        while True:
            try:
                taken.append(self.reports.get_nowait())
            except queue.Empty:
                return taken

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the child exited with {self.process.returncode}{self.tail()}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as a pod gets, and wait for the child to finish its batch and commit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(
                f"the child ignored SIGTERM for {timeout:.0f} s{self.tail()}"
            ) from None
        finally:
            self._log_file.close()

    def tail(self) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        lines = self.log.read_text(errors="replace").splitlines()[-20:]
        return ("; its log ends:\n" + "\n".join(lines)) if lines else ""
