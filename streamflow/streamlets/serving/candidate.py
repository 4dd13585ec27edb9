"""The candidate of a rollout: a second model beside the stable one, and its share.

:class:`~.follower.ModelFollower` keeps the stable model; a serving streamlet also
keeps a :class:`CandidateSlot`, which follows the descriptors that carry a
``rollout`` (see :mod:`streamflow.models.rollout`). The candidate loads off the hot
path on its own :class:`~streamflow.models.swap.LiveSwap`, so the stable model serves
every record until it is in; a share change of the loaded candidate takes effect at
the next batch, without a load. A candidate leaves when its rollout ends, when a newer
candidate replaces it, or when a stable version at or past its own arrives, and is
promoted without a second load when that stable version is the candidate itself.

What the slot decides is reported as :class:`Report` tuples, which the follower writes
on its ``status`` outlet with ``role: candidate``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.kinds import ModelState
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.swap import LiveSwap
from streamflow.streamlets.serving.active import ActiveModel

__all__ = ["CandidateSlot", "Report", "resident_bytes"]


class Report(NamedTuple):
    """A candidate's step, for the ``status`` outlet."""

    model: str
    version: int
    state: ModelState
    message: str


class CandidateSlot:
    """The candidate model of one replica, and what share of the records it meets."""

    def __init__(
        self,
        load: Callable[[ModelDescriptor, threading.Event], ActiveModel],
        close: Callable[[ActiveModel], Awaitable[None]],
        *,
        max_resident_bytes: int = 0,
    ) -> None:
        self.swap: LiveSwap[ModelDescriptor, ActiveModel] = LiveSwap(
            load, close=close, thread_name="candidate-load", workers=2
        )
        self.descriptor: ModelDescriptor | None = None  # the candidate asked for
        self.rollout: Rollout | None = None  # what it meets
        self.held: ModelDescriptor | None = None  # one that came before any stable version
        self.max_resident_bytes = max_resident_bytes

    @property
    def current(self) -> ActiveModel | None:
        """The loaded candidate, once it meets records."""
        return self.swap.current

    def plan(self) -> tuple[Rollout, ActiveModel] | None:
        """What a batch does beside the stable model: the rollout and its loaded candidate."""
        current, rollout = self.swap.current, self.rollout
        if current is None or rollout is None:
            return None
        return rollout, current

    def offer(self, descriptor: ModelDescriptor, stable: int) -> list[Report]:
        """A candidate descriptor arrived; ``stable`` is the newest stable version (0: none).
        Admission (kind, location, digest) is the follower's, before this.

        With no stable version yet, the candidate is held, not loaded: a replica that
        replays a compacted topic can meet it before the stable record (one written
        again later, by a publisher at start-up, say); :meth:`stable_is` then decides."""
        rollout = descriptor.rollout
        assert rollout is not None
        if rollout.mode is RolloutMode.END:
            return [self._end(descriptor)]
        refusal = rollout.refusal()
        if refusal is None and stable and descriptor.version <= stable:
            refusal = f"version {descriptor.version} is not newer than the stable version {stable}"
        mine = self.descriptor or self.held
        if refusal is None and mine is not None and descriptor.version < mine.version:
            refusal = f"version {descriptor.version} is older than the candidate {mine.version}"
        if refusal is None and mine is not None and descriptor.version == mine.version:
            if descriptor.artifact != mine.artifact:
                refusal = (
                    f"version {mine.version} is already the candidate, with another artifact: "
                    "give the new one its own version"
                )
            elif self.held is None:  # the same candidate, a new share: no load
                self.descriptor, self.rollout = descriptor, rollout
                state = ModelState.SERVING if self.current is not None else ModelState.LOADING
                return [Report(descriptor.name, descriptor.version, state, rollout.describe())]
        if refusal is not None:
            return [Report(descriptor.name, descriptor.version, ModelState.REJECTED, refusal)]
        reports = []
        if self.descriptor is not None:
            reports.append(self._leave(f"replaced by the candidate {descriptor.version}"))
        if not stable:
            self.held = descriptor
            message = "held until a stable version arrives to roll out against"
            return [
                *reports,
                Report(descriptor.name, descriptor.version, ModelState.LOADING, message),
            ]
        self.held = None
        return [*reports, self._load(descriptor)]

    def stable_is(self, stable: int) -> list[Report]:
        """A stable version ``stable`` came: a candidate at or below it leaves, and one
        held for a stable version starts loading if it is newer."""
        held, self.held = self.held, None
        if held is not None:
            if held.version > stable:
                return [self._load(held)]
            why = f"version {stable} is the stable one"
            return [Report(held.name, held.version, ModelState.RETIRED, why)]
        mine = self.descriptor
        if mine is None or mine.version > stable:
            return []
        return [self._leave(f"version {stable} is the stable one now")]

    def _load(self, descriptor: ModelDescriptor) -> Report:
        rollout = descriptor.rollout
        assert rollout is not None
        self.descriptor, self.rollout = descriptor, rollout
        self.swap.submit(descriptor)
        message = f"candidate ({rollout.describe()} once loaded): {descriptor.summary()}"
        return Report(descriptor.name, descriptor.version, ModelState.LOADING, message)

    def promoted(self, descriptor: ModelDescriptor) -> ActiveModel | None:
        """A stable descriptor that is the loaded candidate (its version and artifact):
        the candidate, taken out of the slot for the stable one to adopt; else None."""
        mine = self.descriptor
        if mine is None or self.current is None or mine.version != descriptor.version:
            return None
        if mine.artifact != descriptor.artifact:
            return None
        self.descriptor = self.rollout = None
        return self.swap.drop()

    def poll(self) -> Report | None:
        """Between batches: the candidate's load that finished, if one did."""
        swapped = self.swap.poll()
        if swapped is None:
            return None
        descriptor = swapped.spec
        if swapped.loaded is None:
            self.descriptor = self.rollout = None
            exc = swapped.error
            message = f"{type(exc).__name__}: {exc}; the stable version meets every record"
            return Report(descriptor.name, descriptor.version, ModelState.FAILED, message)
        resident = resident_bytes()
        if self.max_resident_bytes and resident > self.max_resident_bytes:
            loaded = self.swap.drop()
            if loaded is not None:
                self.swap.retire(loaded)
            self.descriptor = self.rollout = None
            message = (
                f"with the candidate loaded the replica holds {_mib(resident)} resident, over "
                f"max_resident_mb ({_mib(self.max_resident_bytes)}): unloaded, the stable "
                "version meets every record"
            )
            return Report(descriptor.name, descriptor.version, ModelState.FAILED, message)
        rollout = self.rollout
        what = rollout.describe() if rollout is not None else "candidate"
        message = f"candidate, {what}; {swapped.loaded.description}"
        if resident:
            message += f"; the replica holds both models in {_mib(resident)} resident"
        return Report(descriptor.name, descriptor.version, ModelState.SERVING, message)

    async def close_retired(self) -> None:
        await self.swap.close_retired()

    async def close(self) -> None:
        await self.swap.close()

    def shutdown(self) -> None:
        self.swap.shutdown()

    def _end(self, descriptor: ModelDescriptor) -> Report:
        """Always answered, so whoever ended it hears from every replica."""
        mine = self.descriptor or self.held
        if mine is None or mine.version != descriptor.version:
            # promoted already, ended before, or it never loaded here (failed, refused)
            why = "its rollout ended; this replica had no such candidate loaded"
            return Report(descriptor.name, descriptor.version, ModelState.RETIRED, why)
        if mine is self.held:
            self.held = None
            return Report(mine.name, mine.version, ModelState.RETIRED, "its rollout ended")
        return self._leave("rolled back: its rollout ended")

    def _leave(self, why: str) -> Report:
        mine = self.descriptor
        assert mine is not None
        loaded = self.swap.drop()
        if loaded is not None:
            self.swap.retire(loaded)
        self.descriptor = self.rollout = None
        return Report(mine.name, mine.version, ModelState.RETIRED, why)


def resident_bytes() -> int:
    """This process's resident memory now (0 where the system does not say)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"
