"""A replica's stores: opened and restored on assignment, written with each batch.

The processing loop calls in at four places, and the order is what makes
state as safe as the outputs:

* ``on_assign`` (inside ``consume``, before any record of the partition is
  returned): open the partition's SQLite file and replay its changelog from
  the file's checkpoint to the end a ``read_committed`` reader sees. Nothing
  of the partition reaches the logic before that is done.
* ``flush`` (after the batch's outputs, before its offsets): the batch's
  writes go to the changelog through the delivery, so under exactly-once they
  are in the batch's transaction, and under at-least-once they are
  acknowledged before the batch's offsets are stored.
* ``commit`` (once the offsets are through) or ``rollback`` (a
  ``Backpressure``, an aborted transaction: the batch will be retried): the
  writes join the local store, or are forgotten.
* ``on_revoke`` and ``close``: the file is checkpointed at the changelog's end,
  so the next owner on this machine replays only what came after.

Writes are taken only while batch logic runs: a write from a control record
or ``between_batches`` would belong to no batch, and no transaction.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import TopicPartition

from streamflow.api.state import Located, StateError
from streamflow.runtime.state.store import PartitionStore

__all__ = ["ChangelogReader", "Restored", "StateManager", "WriteChangelog"]

log = logging.getLogger("streamflow.runtime.state")

#: How the manager writes a changelog record: (topic, partition, key, value or None).
WriteChangelog = Callable[[str, int, bytes, bytes | None], None]


class ChangelogReader(Protocol):
    """Reads a changelog partition back: Kafka in a replica, the memory broker in tests."""

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(first offset kept, the end a read_committed reader sees)."""

    def identity(self, topic: str) -> str:
        """What tells this topic from one of the same name made after it was deleted."""

    def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[bytes, bytes | None]]:
        """The (key, value or None) records from ``start`` up to ``end``, in order, as
        written: the manager judges the keys (:func:`_keyed`)."""


@dataclasses.dataclass(frozen=True)
class Restored:
    """What one restore did, for the log and the tests."""

    inlet: str
    partition: int
    records: int  # changelog records applied
    seconds: float
    wiped: bool  # the local file was of no use (none yet, or of another changelog)


class StateManager:
    """The stores of one replica (``streamflow.api.state.State``)."""

    def __init__(
        self,
        *,
        changelogs: Mapping[str, tuple[str, str]],
        directory: Path,
        reader: ChangelogReader,
    ) -> None:
        """``changelogs``: each data inlet's topic -> (inlet name, its changelog topic)."""
        self._changelogs = dict(changelogs)
        self._by_inlet = {inlet: changelog for inlet, changelog in self._changelogs.values()}
        self._directory = directory
        self._reader = reader
        self._stores: dict[tuple[str, int], PartitionStore] = {}
        self._writable = False
        self.restored: list[Restored] = []

    # -- what the streamlet sees ---------------------------------------------

    def of(self, record: Located) -> PartitionStore:
        return self.partition(record.inlet, record.partition)

    def partition(self, inlet: str, partition: int) -> PartitionStore:
        store = self._stores.get((inlet, partition))
        if store is None:
            held = ", ".join(f"{i}[{p}]" for i, p in sorted(self._stores)) or "none"
            raise StateError(
                f"no state for {inlet}[{partition}]: this replica holds {held}"
                if inlet in self._by_inlet
                else f"{inlet!r} is not a data inlet of this streamlet"
            )
        return store if self._writable else _Guarded(store)  # type: ignore[return-value]

    def held(self) -> list[tuple[str, int]]:
        return sorted(self._stores)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.held())

    # -- what the processing loop calls --------------------------------------

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            found = self._changelogs.get(tp.topic)
            if found is not None and (found[0], tp.partition) not in self._stores:
                self._open(found[0], found[1], tp.partition)

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            found = self._changelogs.get(tp.topic)
            if found is not None:
                self._close(found[0], tp.partition)

    def writing(self, allowed: bool) -> None:
        """Writes are taken only while batch logic runs (see the module's docstring)."""
        self._writable = allowed

    @property
    def dirty(self) -> bool:
        return any(store.dirty for store in self._stores.values())

    def flush(self, write: WriteChangelog) -> int:
        """The batch's writes to the changelog; how many records were written."""
        count = 0
        for (inlet, partition), store in self._stores.items():
            for key, value in store.changes():
                write(self._by_inlet[inlet], partition, key.encode(), value)
                count += 1
        return count

    def savepoint(self) -> None:
        for store in self._stores.values():
            store.savepoint()

    def undo(self) -> None:
        for store in self._stores.values():
            store.undo()

    def commit(self) -> None:
        for store in self._stores.values():
            store.commit()

    def rollback(self) -> None:
        for store in self._stores.values():
            store.rollback()

    def close(self) -> None:
        for inlet, partition in list(self._stores):
            self._close(inlet, partition)

    # -- restore ---------------------------------------------------------------

    def _open(self, inlet: str, changelog: str, partition: int) -> None:
        started = time.monotonic()
        store = PartitionStore(
            self._directory / f"{inlet}-{partition}.sqlite", inlet=inlet, partition=partition
        )
        first, end = self._reader.bounds(changelog, partition)
        identity = self._reader.identity(changelog)
        start = store.checkpoint
        # the file is no use when it was made from another changelog (one deleted and
        # made again under the same name), or when the changelog no longer has what came
        # after it (compacted past it): then the changelog alone is the state
        known = store.changelog_id
        why = ""
        if known and known != identity:
            why = " (the local copy was of an earlier changelog of that name: rebuilt)"
        elif known and not first <= start <= end:
            why = " (the local copy was older than the changelog keeps: rebuilt)"
        wiped = known != identity or not first <= start <= end
        if wiped:
            store.wipe()
            store.save_changelog_id(identity)
            start = first
        records = self._reader.read(changelog, partition, start, end)
        count = store.restore(_keyed(records, f"{changelog}[{partition}]"), upto=end)
        seconds = time.monotonic() - started
        self.restored.append(Restored(inlet, partition, count, seconds, wiped))
        keys, size = store.size()
        log.info(
            "restored the state of %s[%d]: %d changelog records in %.2fs%s; %d keys, %d bytes",
            inlet,
            partition,
            count,
            seconds,
            why,
            keys,
            size,
        )
        self._stores[(inlet, partition)] = store

    def _close(self, inlet: str, partition: int) -> None:
        store = self._stores.pop((inlet, partition), None)
        if store is None:
            return
        try:
            # everything committed is in the file: next time, replay only what follows
            store.save_checkpoint(self._reader.bounds(self._by_inlet[inlet], partition)[1])
        except Exception as exc:  # the broker is away: the next restore replays more
            log.info("no checkpoint for %s[%d]: %s", inlet, partition, exc)
        store.close()


class _Guarded:
    """A store outside batch logic: it reads, and refuses writes with the reason."""

    def __init__(self, store: PartitionStore) -> None:
        self._store = store

    def get(self, key: str, default: Any = None) -> Any:
        return self._store.get(key, default)

    def keys(self, prefix: str = "") -> list[str]:
        return self._store.keys(prefix)

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def set(self, key: str, value: Any) -> None:
        raise _outside_batch()

    def delete(self, key: str) -> None:
        raise _outside_batch()


def _keyed(
    records: Iterator[tuple[bytes, bytes | None]], where: str
) -> Iterator[tuple[str, bytes | None]]:
    """The records whose keys are text, as the store keeps them. A key that is not UTF-8
    was written by no streamlet (a key is a ``str``) and no logic can ask for it: it is
    skipped, not allowed to stop the restore (which every restart would repeat)."""
    skipped = 0
    for key, value in records:
        try:
            text = key.decode()
        except UnicodeDecodeError:
            skipped += 1
            continue
        yield text, value
    if skipped:
        log.warning(
            "skipped %d records of %s whose keys are not UTF-8: no streamlet writes such a "
            "key; was the changelog written by another program?",
            skipped,
            where,
        )


def _outside_batch() -> StateError:
    return StateError(
        "state is written only in process or process_batch: a write from a control record "
        "or between batches would belong to no batch (and no transaction)"
    )
