"""Which model version made each row, and windows that never mix two versions.

A report must name the model that made the predictions it judges. The detector
cannot use the version it holds when a window closes: it reads the model's
control topic at its own pace, and when it lags behind the classifier it has
already seen version 2 while it still reads version 1's predictions. So the
version travels with the rows:

* an output row carries its own (the ``model_version`` field or the
  ``streamflow-model`` header); one without a version takes the newest
  descriptor's, and says so in its ``origin``;
* an input row carries none. It takes the version of the prediction for the
  same record (the same key; serving keeps keys), and waits for that
  prediction when it has not been read yet. Only a row without a key, or one
  whose prediction does not come within ``capacity`` waiting rows, takes the
  newest descriptor's version instead.

Windows are then cut per version (:class:`VersionedWindows`), so none spans a
switch. When a newer version appears, the older one's open window is not
closed at once: outputs of the old model may still be in flight on other
partitions or replicas. It is closed short, with what it has, when the
newest version completes its first window (and again for stragglers at each
later one), so every row lands in exactly one window of its own version.

All of this is pure (state in, state and windows out), like :mod:`.windows`:
the streamlet commits the new state only once the windows are evaluated.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator
from typing import TypeVar

import numpy as np

from streamflow.streamlets.drift import windows

__all__ = ["VersionJoin", "VersionedWindows", "advance", "runs"]

_V = TypeVar("_V")


@dataclasses.dataclass(frozen=True)
class VersionedWindows:
    """Count-based windows, one sequence per model version, indexed across versions."""

    size: int
    step: int
    widths: tuple[int, int, int]  # numeric, categorical and text columns of a row
    states: dict[int, windows.WindowState] = dataclasses.field(default_factory=dict)
    newest: int = -1
    index: int = 0  # the next window's index, whatever its version

    @property
    def filled(self) -> int:
        """Rows in no window yet, over every version."""
        return sum(s.unreported for s in self.states.values())


def runs(versions: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(start, stop, version) of each run of equal versions."""
    if not len(versions):
        return
    cuts = np.flatnonzero(np.diff(versions)) + 1
    starts = [0, *cuts.tolist()]
    stops = [*cuts.tolist(), len(versions)]
    for start, stop in zip(starts, stops, strict=True):
        yield start, stop, int(versions[start])


def advance(
    state: VersionedWindows, rows: windows.Rows
) -> tuple[VersionedWindows, list[windows.Window]]:
    """Add ``rows`` (each with its version); the windows they complete or close, in order."""
    states = dict(state.states)
    newest, index = state.newest, state.index
    out: list[windows.Window] = []
    for start, stop, version in runs(rows.version):
        current = states.get(version) or windows.WindowState.start(
            size=state.size,
            step=state.step,
            numeric=state.widths[0],
            categorical=state.widths[1],
            text=state.widths[2],
        )
        current, completed = windows.advance(current, rows.take(slice(start, stop)))
        states[version] = current
        newest = max(newest, version)
        if version == newest and completed:
            # the newest version has a full window: older ones have had their grace
            for older in sorted(v for v in states if v < newest):
                short = windows.close(states.pop(older), last=completed[0].last)
                if short is not None:
                    out.append(dataclasses.replace(short, index=index, last=start + short.last))
                    index += 1
        for window in completed:
            out.append(dataclasses.replace(window, index=index, last=start + window.last))
            index += 1
    return dataclasses.replace(state, states=states, newest=newest, index=index), out


class VersionJoin:
    """Input rows waiting for their prediction's version, and versions waiting for their input.

    Matched by record key, first in first out per key, in bounded memory. It is
    copied per batch (:meth:`copy`) so that a retried batch starts from the state
    it started from; the values are tuples, so the copy is shallow.
    """

    def __init__(self, *, capacity: int) -> None:
        self.capacity = capacity
        self.waiting: collections.OrderedDict[str, tuple[tuple[windows.Rows, int], ...]] = (
            collections.OrderedDict()
        )
        # per key: (version, origin) of predictions whose input has not been read yet
        self.versions: collections.OrderedDict[str, tuple[tuple[int, int], ...]] = (
            collections.OrderedDict()
        )
        self.waiting_rows = 0

    def copy(self) -> VersionJoin:
        other = VersionJoin(capacity=self.capacity)
        other.waiting = self.waiting.copy()
        other.versions = self.versions.copy()
        other.waiting_rows = self.waiting_rows
        return other

    def without_waiting(self) -> VersionJoin:
        """This join with no input waiting (they were cut for settings now replaced)."""
        other = VersionJoin(capacity=self.capacity)
        other.versions = self.versions.copy()
        return other

    def prediction(self, key: str, version: tuple[int, int]) -> tuple[windows.Rows, int] | None:
        """The input row this prediction's version labels, if it is waiting; else remember it."""
        queued = self.waiting.get(key)
        if queued:
            _set(self.waiting, key, queued[1:])
            self.waiting_rows -= 1
            return queued[0]
        _set(self.versions, key, (*self.versions.get(key, ()), version))
        self.versions.move_to_end(key)
        while len(self.versions) > self.capacity:
            self.versions.popitem(last=False)
        return None

    def input(
        self, key: str, row: tuple[windows.Rows, int]
    ) -> tuple[tuple[int, int] | None, list[tuple[windows.Rows, int]]]:
        """(this input's prediction's version and origin if it came first, rows given up on)."""
        known = self.versions.get(key)
        if known:
            _set(self.versions, key, known[1:])
            return known[0], []
        _set(self.waiting, key, (*self.waiting.get(key, ()), row))
        self.waiting.move_to_end(key)
        self.waiting_rows += 1
        evicted: list[tuple[windows.Rows, int]] = []
        while self.waiting_rows > self.capacity:
            oldest, queued = next(iter(self.waiting.items()))
            evicted.append(queued[0])
            _set(self.waiting, oldest, queued[1:])
            self.waiting_rows -= 1
        return None, evicted


def _set(
    table: collections.OrderedDict[str, tuple[_V, ...]], key: str, value: tuple[_V, ...]
) -> None:
    """Keep a non-empty queue under ``key``, and drop an empty one."""
    if value:
        table[key] = value
    else:
        table.pop(key, None)
