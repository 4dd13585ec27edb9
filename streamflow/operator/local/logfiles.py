"""Replica log files: written by each replica, read by ``streamflow logs``.

Each replica's output goes to ``logs/<streamlet>-<i>.log``, a file the replica
holds and rotates itself (:mod:`streamflow.runtime.logfile`), so it outlives
the supervisor. A replica may log for weeks, so a file is capped: past the cap
it is renamed to ``.log.1`` (replacing the previous one) and a new file begins,
so a replica's log never takes more than twice the cap. Readers take the last
lines of the rotated file and the current one, and *follow* by polling, which
survives a rotation (the file shrinks or is replaced) without any help from the
writer.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["follow", "last_lines", "replica_logs"]

DEFAULT_MAX_BYTES = 8 * 1024 * 1024


def replica_logs(directory: Path, streamlet: str) -> dict[str, Path]:
    """``{replica name: current log file}`` of a streamlet, in replica order."""
    found: dict[int, Path] = {}
    for path in directory.glob(f"{streamlet}-*.log"):
        index = path.name[len(streamlet) + 1 : -len(".log")]
        if index.isdigit():
            found[int(index)] = path
    return {f"{streamlet}-{i}": found[i] for i in sorted(found)}


def last_lines(path: Path, count: int | None) -> list[str]:
    """The last ``count`` lines (all when None) of a log and the file it rotated into."""
    lines: deque[str] = deque(maxlen=count) if count is not None else deque()
    if count == 0:
        return []
    for part in (path.with_name(path.name + ".1"), path):
        with contextlib.suppress(FileNotFoundError), part.open(encoding="utf-8") as handle:
            lines.extend(line.rstrip("\n") for line in handle)
    return list(lines)


def follow(
    discover: Callable[[], dict[str, Path]],
    *,
    wait: Callable[[float], bool],
    start_at_end: bool = True,
    start_of: Callable[[str], tuple[int, int] | None] = lambda _replica: None,
    interval: float = 0.25,
) -> Iterator[tuple[str, str]]:
    """``(replica, line)`` as lines are appended, until ``wait(interval)`` returns True;
    then one round more, for what was written before the stop (a replica's last lines).

    ``discover`` is asked each round for the current files, so replicas added
    by a scale-up are picked up. Where a replica's file is first read from is
    ``start_of(replica)`` (an inode and offset noted before the replica could
    write) when it knows; else its end, for files that exist at the start when
    ``start_at_end`` (their past was shown already), and its beginning otherwise.
    """
    positions: dict[str, tuple[int, int]] = {}  # replica -> (inode, offset)
    first = True
    stopped = False
    while True:
        for replica, path in discover().items():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            inode, offset = positions.get(replica) or start_of(replica) or (stat.st_ino, -1)
            if offset < 0:
                offset = stat.st_size if first and start_at_end else 0
            if inode != stat.st_ino or stat.st_size < offset:
                inode, offset = stat.st_ino, 0  # rotated: the new file from its start
            offset, lines = _read_from(path, offset)
            positions[replica] = (inode, offset)
            for line in lines:
                yield replica, line
        first = False
        if stopped:
            return
        stopped = wait(interval)


def _read_from(path: Path, offset: int) -> tuple[int, list[str]]:
    """Whole lines from ``offset``; a partial last line waits for the next round."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return offset, []
    end = data.rfind(b"\n")
    if end < 0:
        return offset, []
    chunk = data[: end + 1]
    text = chunk.decode("utf-8", errors="replace")
    return offset + len(chunk), text.splitlines()
