"""One input partition's state: committed values in SQLite, the running batch's writes apart.

The SQLite file is a cache of the changelog, kept on the replica's disk so
that a restart on the same machine replays only the changelog's tail: it
records the changelog offset it holds everything before (``checkpoint``).
It holds only what a committed batch wrote, so it can never be ahead of the
changelog under exactly-once; a crash between the two is made good by
replaying the changelog from the checkpoint, since every changelog record is
a whole value (or a deletion) and replaying one twice changes nothing.

The batch's writes wait in ``_dirty`` (encoded at ``set``, so an unstorable
value is refused where the logic made it) until the runtime has written them
to the changelog and the batch counts (:meth:`commit`), or is thrown away
(:meth:`rollback`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from streamflow.api.state import StateError
from streamflow.runtime.state import codec

__all__ = ["PartitionStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value NOT NULL)",
)
_CACHE_ENTRIES = 4096  # decoded values kept in memory, newest used last
_MISSING = object()


class PartitionStore:
    """The key-value state of one partition of one inlet (``streamflow.api.state.Store``)."""

    def __init__(self, path: Path, *, inlet: str, partition: int) -> None:
        self.inlet = inlet
        self.partition = partition
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            self._db.execute(statement)
        self._cache: dict[str, Any] = {}
        self._dirty: dict[str, tuple[bytes | None, Any]] = {}
        # since the savepoint: each key's entry in _dirty before its first write (None: none)
        self._undo: dict[str, tuple[bytes | None, Any] | None] = {}

    # -- the streamlet's side ------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        pending = self._dirty.get(key)
        if pending is not None:
            return default if pending[0] is None else pending[1]
        value = self._cache.pop(key, _MISSING)
        if value is _MISSING:
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            if row is None:
                return default
            try:
                value = _read_only(codec.decode(row[0]))
            except Exception as exc:  # not what a store writes: say where, not msgpack's words
                raise StateError(
                    f"the state of {self.inlet}[{self.partition}] under {key!r} is unreadable "
                    f"({type(exc).__name__}: {exc}); was its changelog written by another program?"
                ) from None
            if len(self._cache) >= _CACHE_ENTRIES:
                del self._cache[next(iter(self._cache))]
        self._cache[key] = value  # last: the most recently used
        return value

    def set(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"a state key is a str, not {type(key).__name__}")
        entry = (codec.encode(value), _read_only(value))
        if key not in self._undo:
            self._undo[key] = self._dirty.get(key)
        self._dirty[key] = entry

    def delete(self, key: str) -> None:
        if key not in self._undo:
            self._undo[key] = self._dirty.get(key)
        self._dirty[key] = (None, None)

    def keys(self, prefix: str = "") -> list[str]:
        found = {
            row[0]
            for row in self._db.execute(
                "SELECT key FROM kv WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
            )
        }
        for key, (data, _) in self._dirty.items():
            if key.startswith(prefix):
                (found.add if data is not None else found.discard)(key)
        return sorted(found)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _MISSING) is not _MISSING

    # -- the runtime's side --------------------------------------------------

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def changes(self) -> list[tuple[str, bytes | None]]:
        """The batch's writes, for the changelog: (key, value bytes or None for a deletion)."""
        return [(key, data) for key, (data, _) in self._dirty.items()]

    def savepoint(self) -> None:
        """What :meth:`undo` goes back to: the writes so far (one record's logic starts)."""
        self._undo.clear()

    def undo(self) -> None:
        """Forget the writes since the savepoint (that record's logic raised)."""
        for key, before in self._undo.items():
            if before is None:
                self._dirty.pop(key, None)
            else:
                self._dirty[key] = before
        self._undo.clear()

    def commit(self) -> None:
        """The batch counts: its writes join the committed state."""
        self._undo.clear()
        if not self._dirty:
            return
        self._write(((key, data) for key, (data, _) in self._dirty.items()))
        for key, (data, value) in self._dirty.items():
            if data is None:
                self._cache.pop(key, None)
            else:
                self._cache[key] = value
        self._dirty.clear()

    def rollback(self) -> None:
        """The batch does not count (it will be retried): forget its writes."""
        self._dirty.clear()
        self._undo.clear()

    def restore(self, records: Iterable[tuple[str, bytes | None]], *, upto: int) -> int:
        """Apply changelog records (a None value deletes); afterwards, hold everything before
        changelog offset ``upto``. Returns how many records were applied."""
        count = self._write(records, checkpoint=upto)
        self._cache.clear()
        return count

    def wipe(self) -> None:
        """Forget everything, checkpoint included: the changelog is all there is."""
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM kv")
        self._db.execute("DELETE FROM meta")
        self._db.execute("COMMIT")
        self._cache.clear()
        self._dirty.clear()

    @property
    def checkpoint(self) -> int:
        """The changelog offset this file holds everything before (0: nothing known)."""
        row = self._db.execute("SELECT value FROM meta WHERE name = 'checkpoint'").fetchone()
        return int(row[0]) if row else 0

    @property
    def changelog_id(self) -> str:
        """Which changelog this file was restored from (its topic id): '' when none."""
        row = self._db.execute("SELECT value FROM meta WHERE name = 'changelog'").fetchone()
        return str(row[0]) if row else ""

    def save_changelog_id(self, identity: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO meta (name, value) VALUES ('changelog', ?)", (identity,)
        )

    def save_checkpoint(self, offset: int) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO meta (name, value) VALUES ('checkpoint', ?)", (offset,)
        )

    def size(self) -> tuple[int, int]:
        """(keys, bytes of values) committed."""
        row = self._db.execute(
            "SELECT count(*), coalesce(sum(length(value)), 0) FROM kv"
        ).fetchone()
        return int(row[0]), int(row[1])

    def close(self) -> None:
        self._dirty.clear()
        self._cache.clear()
        self._db.close()

    def _write(
        self, records: Iterable[tuple[str, bytes | None]], *, checkpoint: int | None = None
    ) -> int:
        count = 0
        self._db.execute("BEGIN")
        try:
            for key, data in records:
                if data is None:
                    self._db.execute("DELETE FROM kv WHERE key = ?", (key,))
                else:
                    self._db.execute(
                        "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, data)
                    )
                count += 1
            if checkpoint is not None:
                self.save_checkpoint(checkpoint)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return count


def _read_only(value: Any) -> Any:
    """Arrays read from the store are read-only: changed in place, they would be changed
    in the store's memory but not on disk or in the changelog."""
    if codec.is_array(value) and value.flags.writeable:
        value = value.copy()  # the caller's array stays the caller's
        value.flags.writeable = False
    return value
