"""The detector's windows in the streamlet's state: per input partition, written as they change.

A restarted detector (a deploy, a crash, a rescheduled pod) carries on with
the windows it had: its next report covers the whole window, the rows from
before the restart included, and an alert it had raised is not raised again.

Each watched inlet's partition has a store (:mod:`streamflow.api.state`); in it:

``meta``
    the settings the rows were cut for (another config starts afresh), per
    model version the window counters and the live row chunks, the first-N
    reference's chunks, the last verdict, and a token that changes with every
    write.
``rows/<version>/<first row>``
    window rows, one chunk per batch that added some: a batch writes only its
    own rows, and a chunk is deleted once every row of it has left the
    buffer, so the changelog carries each row about twice (its write and its
    deletion) however large the window, instead of the window once per batch.
``ref/<first row>``
    the first-N reference's rows, kept once it is made: it is rebuilt from them.

What stays in memory is a cache, checked against ``meta``'s token before each
batch: a batch that was handed back (an aborted transaction) or a partition
that went away and came back reads the store again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from streamflow.api.state import State, Store
from streamflow.streamlets.drift import detect, sources, versions, windows
from streamflow.streamlets.drift.settings import DriftSettings

__all__ = ["META", "Partitions", "Tracked", "config_of", "load", "save", "verdict_of"]

META = "meta"
_ROWS, _REF = "rows/", "ref/"
_FIELDS = tuple(f.name for f in dataclasses.fields(windows.Rows))


@dataclasses.dataclass(frozen=True)
class Tracked:
    """A partition's source as last read from or written to its store (``meta``: None if
    the store holds nothing of these settings)."""

    source: sources.Source
    meta: dict[str, Any] | None

    def current(self, store: Store, settings: DriftSettings) -> bool:
        """Whether the store still holds what this was read from or written as."""
        meta = store.get(META)
        if self.meta is None:
            return meta is None or list(meta["config"]) != config_of(settings)
        return meta is not None and meta["token"] == self.meta["token"]


Key = tuple[str, int]  # a watched inlet and one of its partitions


class Partitions:
    """The cache over the stores of the partitions a replica holds: each watched inlet's
    partitions as their stores hold them, read before a batch and written after it."""

    def __init__(self) -> None:
        self._tracked: dict[Key, tuple[Store, Tracked]] = {}

    @property
    def filled(self) -> int:
        """Rows toward a window, over every partition held."""
        return sum(t.source.state.filled for _, t in self._tracked.values())

    def clear(self) -> None:
        """Forget them all: the stores are rewritten for new settings as rows come."""
        self._tracked.clear()

    def verdicts(self) -> dict[Key, bool]:
        """Each partition's last verdict: drifted or not."""
        return {key: verdict_of(t) for key, (_, t) in self._tracked.items()}

    def current(
        self, state: State, fresh: Mapping[str, sources.Source], settings: DriftSettings
    ) -> dict[str, sources.Partitioned]:
        """Each watched inlet's partitions as their stores hold them (read again when the
        store changed under the cache: a batch handed back, a partition that moved)."""
        current: dict[str, sources.Partitioned] = {}
        held = set(state.held())
        for key in [k for k in self._tracked if k not in held]:
            del self._tracked[key]  # gone to another replica, with its store
        for role, start in fresh.items():
            parts: dict[int, sources.Source] = {}
            for inlet, partition in held:
                if inlet != role:
                    continue
                store = state.partition(inlet, partition)
                cached = self._tracked.get((inlet, partition))
                if (
                    cached is None
                    or cached[0] is not store
                    or not cached[1].current(store, settings)
                ):
                    cached = (store, load(store, start, settings))
                    self._tracked[(inlet, partition)] = cached
                parts[partition] = cached[1].source
            current[role] = sources.Partitioned(start, parts)
        return current

    def commit(
        self,
        state: State,
        before: Mapping[str, sources.Partitioned],
        after: Mapping[str, sources.Partitioned],
        drifted: Mapping[Key, bool],
        *,
        settings: DriftSettings,
        moved: Callable[[int], None],
    ) -> None:
        """Write each partition's new state to its store (with the batch); ``moved`` is told
        of the rows of a partition this replica no longer holds."""
        for role, partitioned in after.items():
            for partition, source in partitioned.parts.items():
                key = (role, partition)
                cached = self._tracked.get(key)
                if cached is None:
                    # rows of a partition this replica no longer holds (they waited for
                    # their prediction while it moved): its new owner has its own
                    moved(source.state.filled)
                    continue
                unchanged = before[role].parts.get(partition) is source
                if unchanged and drifted.get(key, False) == verdict_of(cached[1]):
                    continue
                store = state.partition(role, partition)
                tracked = save(
                    store, cached[1], source, settings=settings, verdict=drifted.get(key, False)
                )
                self._tracked[key] = (store, tracked)


def config_of(settings: DriftSettings) -> list[Any]:
    return [settings.name, settings.version]


def load(store: Store, fresh: sources.Source, settings: DriftSettings) -> Tracked:
    """The partition's source as its store holds it, or ``fresh`` when the store holds
    nothing of these settings."""
    meta = store.get(META)
    if meta is None or list(meta["config"]) != config_of(settings):
        return Tracked(fresh, None)
    widths = fresh.state.widths
    states = {}
    for version, info in meta["versions"].items():
        rows = _read(store, f"{_ROWS}{version}/", info["chunks"], widths)
        first = info["chunks"][0][0] if info["chunks"] else info["seen"]
        buffer = rows.take(slice(info["seen"] - info["buffered"] - first, None))
        states[int(version)] = windows.WindowState(
            settings.window, settings.step, buffer, info["seen"], info["next_end"], info["index"]
        )
    state = versions.VersionedWindows(
        settings.window, settings.step, widths, states, meta["newest"], meta["index"]
    )
    source = dataclasses.replace(
        fresh, state=state, collect=meta["collect"], problem=meta["problem"]
    )
    if meta["ref"]:
        collected = _read(store, _REF, meta["ref"], widths)
        source = dataclasses.replace(source, collected=collected)
        if not source.collect and source.reference is None and not source.problem:
            source = _with_reference(source, collected, settings)
    return Tracked(source, meta)


def save(
    store: Store,
    before: Tracked,
    after: sources.Source,
    *,
    settings: DriftSettings,
    verdict: bool,
) -> Tracked:
    """Write what changed from ``before`` to ``after``; what the store now holds."""
    old = before.meta
    if old is None:  # rows of other settings, if any, are of no use now
        for key in store.keys(prefix=""):
            store.delete(key)
    chunks: dict[str, list[list[int]]] = (
        {v: [list(c) for c in info["chunks"]] for v, info in old["versions"].items()} if old else {}
    )
    counters: dict[str, dict[str, Any]] = {}
    for version, state in after.state.states.items():
        name = str(version)
        seen_before = old["versions"][name]["seen"] if old and name in old["versions"] else 0
        live = chunks.setdefault(name, [])
        if state.seen < seen_before:  # closed and begun again in this batch (a straggler)
            for begin, _ in live:
                store.delete(f"{_ROWS}{name}/{begin:012d}")
            live.clear()
            seen_before = 0
        first_kept = state.seen - len(state.buffer)
        start = max(seen_before, first_kept)
        if state.seen > start:
            added = state.buffer.take(slice(len(state.buffer) - (state.seen - start), None))
            store.set(f"{_ROWS}{name}/{start:012d}", _value(added))
            live.append([start, state.seen - start])
        for begin, count in [c for c in live if c[0] + c[1] <= first_kept]:
            store.delete(f"{_ROWS}{name}/{begin:012d}")
            live.remove([begin, count])
        counters[name] = {
            "seen": state.seen,
            "next_end": state.next_end,
            "index": state.index,
            "buffered": len(state.buffer),
            "chunks": live,
        }
    for name in set(chunks) - set(counters):  # a version closed for good
        for begin, _ in chunks[name]:
            store.delete(f"{_ROWS}{name}/{begin:012d}")
    ref = [list(c) for c in old["ref"]] if old else []
    held = sum(count for _, count in ref)
    if after.collected is not None and len(after.collected) > held:
        store.set(f"{_REF}{held:012d}", _value(after.collected.take(slice(held, None))))
        ref.append([held, len(after.collected) - held])
    meta = {
        "config": config_of(settings),
        "versions": counters,
        "newest": after.state.newest,
        "index": after.state.index,
        "collect": after.collect,
        "problem": after.problem,
        "ref": ref,
        "verdict": verdict,
        "token": os.urandom(8).hex(),
    }
    store.set(META, meta)
    return Tracked(after, meta)


def verdict_of(tracked: Tracked) -> bool:
    """The last window's verdict in this partition (False before the first)."""
    return bool(tracked.meta["verdict"]) if tracked.meta else False


def _value(rows: windows.Rows) -> dict[str, np.ndarray]:
    return {name: getattr(rows, name) for name in _FIELDS}


def _read(
    store: Store, prefix: str, chunks: list[list[int]], widths: tuple[int, int, int]
) -> windows.Rows:
    rows = windows.Rows.empty(*widths)
    for begin, _ in chunks:
        value = store.get(f"{prefix}{begin:012d}")
        if value is None:
            raise ValueError(f"the drift state lacks {prefix}{begin}: its meta is ahead of it")
        rows = rows.concat(windows.Rows(**{name: value[name] for name in _FIELDS}))
    return rows


def _with_reference(
    source: sources.Source, collected: windows.Rows, settings: DriftSettings
) -> sources.Source:
    """The first-N reference made again from its rows, as ``Source.gather`` made it."""
    try:
        reference = detect.prepare_rows(
            collected,
            source.layout,
            settings=settings,
            origin=f"the first {len(collected)} {source.name} records",
        )
    except ValueError as exc:
        return dataclasses.replace(source, problem=str(exc))
    return dataclasses.replace(source, reference=reference)
