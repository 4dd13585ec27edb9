"""Count-based windows over a stream of rows: tumbling (step = size) or sliding (step < size).

Window ``j`` ends after ``size + j * step`` rows and holds the ``size`` rows
before that end, so tumbling windows partition the stream and sliding ones
overlap by ``size - step`` rows. Windows count records, not seconds: a test
needs a minimum sample to have power, and a count is what guarantees one.

Advancing is a pure function from (state, new rows) to (new state, windows),
so the streamlet can evaluate the windows (perhaps on a remote detector that
is down, which retries the whole batch) and only then commit the new state:
a retried batch is never counted twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "DESCRIPTOR",
    "PREDICTION",
    "Rows",
    "Window",
    "WindowState",
    "advance",
    "close",
    "offset_ranges",
]

#: Where a row's model version came from (``Rows.origin``); 0: nowhere, it is unknown.
PREDICTION, DESCRIPTOR = 1, 2


@dataclasses.dataclass(frozen=True)
class Rows:
    """Rows of one source as columns, with where each row came from."""

    numeric: np.ndarray  # (n, numeric features) float64
    categorical: np.ndarray  # (n, categorical features) object (str)
    topic: np.ndarray  # (n,) object
    partition: np.ndarray  # (n,) int64
    offset: np.ndarray  # (n,) int64
    timestamp: np.ndarray  # (n,) int64, milliseconds
    version: np.ndarray  # (n,) int64: the model version that produced the row, 0 if unknown
    origin: np.ndarray  # (n,) int8: PREDICTION or DESCRIPTOR (where the version came from), or 0
    text: np.ndarray  # (n, text features) object: each a tuple of tokens

    def __len__(self) -> int:
        return int(self.offset.shape[0])

    @classmethod
    def empty(cls, numeric: int, categorical: int, text: int = 0) -> Rows:
        return cls(
            np.zeros((0, numeric)),
            np.zeros((0, categorical), dtype=object),
            np.zeros(0, dtype=object),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int8),
            np.zeros((0, text), dtype=object),
        )

    def take(self, rows: slice | np.ndarray) -> Rows:
        return Rows(*(getattr(self, f.name)[rows] for f in dataclasses.fields(self)))

    def concat(self, other: Rows) -> Rows:
        if not len(self):
            return other
        if not len(other):
            return self
        return Rows(
            *(
                np.concatenate([getattr(self, f.name), getattr(other, f.name)])
                for f in dataclasses.fields(self)
            )
        )


@dataclasses.dataclass(frozen=True)
class Window:
    index: int
    rows: Rows
    last: int  # the index, among the rows just added, of the row that completed the window


@dataclasses.dataclass(frozen=True)
class WindowState:
    size: int
    step: int
    buffer: Rows
    seen: int = 0  # rows added so far
    next_end: int = 0  # rows seen when the next window completes
    index: int = 0  # the next window's index

    @classmethod
    def start(
        cls, *, size: int, step: int, numeric: int, categorical: int, text: int = 0
    ) -> WindowState:
        if size < 2:
            raise ValueError(f"a window needs at least 2 records, not {size}")
        if not 1 <= step <= size:
            raise ValueError(f"the step must be between 1 and the window size {size}, not {step}")
        return cls(size, step, Rows.empty(numeric, categorical, text), 0, size, 0)

    @property
    def filled(self) -> int:
        """Rows toward the next window."""
        return self.size - (self.next_end - self.seen)

    @property
    def unreported(self) -> int:
        """Rows added since the last window ended: in no window yet."""
        last_end = self.next_end - self.step if self.index else 0
        return max(0, self.seen - last_end)


def advance(state: WindowState, rows: Rows) -> tuple[WindowState, list[Window]]:
    """Add ``rows``; the windows they complete, and the state after them."""
    buffer = state.buffer.concat(rows)
    first = state.seen - len(state.buffer)  # the stream index of buffer row 0
    seen = state.seen + len(rows)
    windows: list[Window] = []
    next_end, index = state.next_end, state.index
    while next_end <= seen:
        start = next_end - state.size - first
        windows.append(
            Window(index, buffer.take(slice(start, start + state.size)), next_end - 1 - state.seen)
        )
        next_end += state.step
        index += 1
    keep_from = max(0, next_end - state.size - first)
    return (
        dataclasses.replace(
            state,
            buffer=buffer.take(slice(keep_from, None)),
            seen=seen,
            next_end=next_end,
            index=index,
        ),
        windows,
    )


def close(state: WindowState, *, last: int) -> Window | None:
    """The window that ``state`` has open, cut short now; None when every row was in one.

    A short window holds the rows toward the next window (for sliding windows, the
    overlap with the last one too), so it is what that window would have been had
    the stream ended here. ``last`` is where, among the rows just added, it closed.
    """
    if not state.unreported:
        return None
    first = state.seen - len(state.buffer)
    start = max(0, state.next_end - state.size - first)
    return Window(state.index, state.buffer.take(slice(start, None)), last)


def offset_ranges(rows: Rows) -> list[dict[str, Any]]:
    """The first and last offset of each topic-partition in ``rows``."""
    ranges: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in zip(
        rows.topic.tolist(), rows.partition.tolist(), rows.offset.tolist(), strict=True
    ):
        span = ranges.setdefault((topic, partition), [offset, offset])
        span[0] = min(span[0], offset)
        span[1] = max(span[1], offset)
    return [
        {"topic": topic, "partition": partition, "first": first, "last": last}
        for (topic, partition), (first, last) in sorted(ranges.items())
    ]


def stack(values: Sequence[Sequence[float]], width: int) -> np.ndarray:
    """Rows of numbers as a (n, width) float64 matrix, also when there are none."""
    if not values:
        return np.zeros((0, width))
    return np.asarray(values, dtype=np.float64).reshape(len(values), width)
