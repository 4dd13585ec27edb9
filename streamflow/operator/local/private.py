"""``$STREAMFLOW_HOME`` is private to its user: directories 0700, files 0600.

The home holds what the local target knows: application specs, Kafka's
address and client settings, the replicas' logs (whatever a streamlet
prints), the daemon's pid record and locks. None of it is for the other
users of the machine, so everything here is created private whatever the
umask says, rather than made private afterwards (a file briefly 0644 can be
opened in that moment and read forever after).

A home made by an older version (0755/0644) is tightened the first time it is
used, with a warning, the way ``ssh`` insists on a private ``~/.ssh``: only
entries owned by this user are touched, and a home that is not ours is left
alone and warned about.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "ensure_dir",
    "open_private",
    "open_private_binary",
    "private_umask",
    "tighten",
]

DIR_MODE = 0o700
FILE_MODE = 0o600
_LOG = logging.getLogger("streamflow.local")


def ensure_dir(path: Path) -> None:
    """``mkdir -p`` with every directory it creates 0700 (``mkdir -p`` alone uses the umask)."""
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            directory.mkdir(mode=DIR_MODE)
            directory.chmod(DIR_MODE)  # the umask may have taken bits from the owner too


def open_private(path: Path, mode: str = "w", *, encoding: str | None = "utf-8") -> IO[str]:
    """A file opened for writing (``w``) or appending (``a``), created 0600."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    return open(fd, mode, encoding=encoding)


def open_private_binary(path: Path, mode: str = "ab") -> IO[bytes]:
    """A binary file for appending or writing, created 0600 (a child's stdout, say)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    return open(os.open(path, flags, FILE_MODE), mode)


def tighten(home: Path) -> list[Path]:
    """Make an existing, looser home private; the entries changed (none when already private).

    Only the home's own mode is looked at first, so a private home costs one ``stat``.
    """
    try:
        info = home.lstat()
    except FileNotFoundError:
        return []
    if stat.S_IMODE(info.st_mode) & 0o077 == 0:
        return []
    if info.st_uid != os.getuid():
        _LOG.warning("%s belongs to another user and is readable by others; not changed", home)
        return []
    changed = [p for p in (home, *home.rglob("*")) if _make_private(p)]
    _LOG.warning(
        "%s was readable by other users: made it private (directories 0700, files 0600, "
        "%d entries changed)",
        home,
        len(changed),
    )
    return changed


def _make_private(path: Path) -> bool:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
        return False
    current = stat.S_IMODE(info.st_mode)
    if current & 0o077 == 0:
        return False
    path.chmod(current & ~0o077)  # the owner's bits stay (an executable stays executable)
    return True


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Within the block, new files and processes started get umask 077 (a broker's data)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)
