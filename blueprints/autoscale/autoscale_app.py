"""The autoscaling example: wine samples that come in bursts, and a scorer too slow for them.

The samples and the scoring are the wine example's (``../wine/wine_app.py``,
on this blueprint's ``python_paths``); what is new is their timing. The source
trickles a few samples a second and, every so often, lets a burst of them
through at once, the way a batch upload or a backlog replayed after an outage
arrives. The scorer sleeps in proportion to its batch, standing in for a model
server that answers a fixed number of samples a second per replica: one
replica keeps up with the trickle, not with a burst, so the burst shows up as
lag, and the autoscaler adds replicas until it is gone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from wine_app import SAMPLE, QualityScorer, WineSampler

from streamflow import Context, Outlet, Record, Streamlet, params


class BurstySource(Streamlet):
    """A trickle of wine samples, and a burst of them every ``every``, the first after ``first``."""

    out = Outlet(schema=SAMPLE, key=lambda record: str(record["id"]))

    rate = params.Float(default=20.0, min=0.1, description="samples per second between bursts")
    burst = params.Int(default=100_000, min=0, description="samples in a burst; 0: no bursts")
    first = params.Duration(default="1m", description="when the first burst comes, after start")
    every = params.Duration(default="5m", description="time from one burst to the next")
    seed = params.Int(default=42, description="seed of the random walk")

    def setup(self, context: Context) -> None:
        self.context = context

    def source(self) -> Iterator[dict[str, Any]]:  # sync: the runtime pulls it on a thread, fast
        sampler = WineSampler(seed=self.seed)
        produced = 0
        next_burst = time.monotonic() + self.first.total_seconds()
        while True:
            size = self.burst if time.monotonic() >= next_burst else 0
            if size:
                self.context.logger.info("a burst of %d samples", size)
                next_burst += self.every.total_seconds()
            for _ in range(max(size, 1)):
                yield {"id": f"wine-{produced:09d}", **(features := sampler.next()),
                       "quality": sampler.grade(features)}  # fmt: skip
                produced += 1
            time.sleep(1.0 / self.rate)


class SlowScorer(QualityScorer):
    """The wine scorer, held to ``capacity`` samples a second per replica, like a model server."""

    capacity = params.Float(default=1000.0, min=1.0, description="samples per second per replica")

    async def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        await asyncio.sleep(len(records) / self.capacity)  # waiting, as on a remote model
        return [self._score(record.value) for record in records]
