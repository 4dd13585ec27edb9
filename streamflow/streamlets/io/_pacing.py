"""Pacing a source to a rate, without drift, and without a sleep per record.

Each record has a due time on an absolute schedule, ``start + n / rate`` on a
monotonic clock. Waiting for the due time, rather than sleeping ``1 / rate``
after each record, means the time spent producing a record is not added to
the interval, so a long run keeps its rate exactly (no drift).

At high rates a sleep per record costs more than the record. Records due
within ``min_sleep`` of now go out at once, so the source sleeps in batches:
at 10,000 records/s and 5 ms, one sleep per 50 records. They may leave up to
``min_sleep`` early, never late on average.

A source that was held up (Kafka pushing back) would otherwise burst to catch
up on everything it missed; past ``max_lag`` behind, the schedule restarts from
now instead, so a stall is never followed by a flood.

The clock and the sleep are parameters, so tests run on a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Pacer"]


class Pacer:
    """Call :meth:`wait` before each record to hold a source to ``rate`` records/s (0: no limit)."""

    def __init__(
        self,
        *,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        min_sleep: float = 0.005,
        max_lag: float = 1.0,
    ) -> None:
        if rate < 0:
            raise ValueError(f"rate must be 0 (unlimited) or positive, got {rate}")
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.min_sleep = min_sleep
        self.max_lag = max_lag
        self._start: float | None = None
        self._sent = 0

    def wait(self) -> None:
        """Return when the next record is due."""
        if self.rate == 0:
            return
        now = self.clock()
        if self._start is None:
            self._restart(now)
        due = self._due()
        if due - now > self.min_sleep:
            self.sleep(due - now)
        elif now - due > self.max_lag:
            self._restart(now)
        self._sent += 1

    def _due(self) -> float:
        assert self._start is not None
        return self._start + self._sent / self.rate

    def _restart(self, now: float) -> None:
        self._start = now
        self._sent = 0
