"""Advisory file locks (``flock``) between CLI invocations and the daemon.

A lock held through an open file dies with its process, so a daemon killed
with SIGKILL never leaves a stale lock behind the way a pid file would: a free
``daemon.lock`` means, reliably, that no daemon runs for this home.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from streamflow.operator.local import private

__all__ = ["FileLock", "is_held", "locked"]

_POLL_S = 0.05


class FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, timeout: float | None = None) -> bool:
        """Take the lock, waiting up to ``timeout`` seconds (0: just try, None: forever)."""
        if self._fd is not None:
            return True
        private.ensure_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, private.FILE_MODE)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(_POLL_S)  # flock has no timeout of its own
                continue
            self._fd = fd
            return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def is_held(path: Path) -> bool:
    """Whether some process holds the lock now."""
    probe = FileLock(path)
    if probe.acquire(timeout=0):
        probe.release()
        return False
    return True


@contextlib.contextmanager
def locked(path: Path, *, timeout: float | None = None) -> Iterator[bool]:
    """``with locked(path, timeout=0) as got:`` holds the lock inside the block when ``got``."""
    lock = FileLock(path)
    got = lock.acquire(timeout=timeout)
    try:
        yield got
    finally:
        lock.release()
