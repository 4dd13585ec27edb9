"""A process's own log file: its stdout and stderr, rotated by the process itself.

A replica on the local target writes its log to a file it holds, not through a
pipe to its supervisor: when the supervisor dies, the replica keeps running and
its lines keep landing where ``streamflow logs`` reads them (through a pipe they
would be lost, and a write could end the replica with SIGPIPE). The daemon's own
log works the same way.

The file is the process's file descriptors 1 and 2, so everything lands there:
the logging module's lines, ``print``, and what native libraries write. A thread
looks at its size once a second; past the cap the file is renamed to ``.1``
(replacing the previous one) and a new file takes over descriptors 1 and 2, so a
log never takes more than about twice the cap. A line written during the swap
goes to one file or the other, never nowhere. Readers
(``operator.local.logfiles``) follow by polling, which survives the rename.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

__all__ = ["DEFAULT_MAX_BYTES", "OwnLog"]

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
_MODE = 0o600  # logs may hold record values: the owner's only


class OwnLog:
    """Points descriptors 1 and 2 at ``path`` (appending) and keeps it under ``max_bytes``."""

    def __init__(self, path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, every: float = 1.0):
        self.path = path
        self.max_bytes = max_bytes
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="log-rotation", daemon=True)

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._point_at_new_file()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def rotate_if_due(self) -> bool:
        """Rotate when the file is past its cap; whether it did."""
        try:
            size = os.fstat(1).st_size
        except OSError:
            return False
        if size <= self.max_bytes:
            return False
        with contextlib.suppress(FileNotFoundError):
            self.path.replace(self.path.with_name(self.path.name + ".1"))
        self._point_at_new_file()
        return True

    def _point_at_new_file(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _MODE)
        try:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
        finally:
            os.close(fd)

    def _watch(self) -> None:
        while not self._stop.wait(self._every):
            self.rotate_if_due()
