"""The live swap: load the next version off the hot path, hand it over between batches.

A streamlet that follows a versioned control record (serving follows model
descriptors, the drift detector its settings) must never stop its data to
load what the record names: a load may download, unpack and warm a model for
seconds. So the load runs on a worker thread while the current one goes on;
the streamlet asks :meth:`LiveSwap.poll` before each batch (its
``between_batches``), and a finished load is swapped in there, so a batch
always sees one version. The one it replaced is retired: its connections are
closed by :meth:`LiveSwap.close_retired` at the start of the next batch, on
the event loop, once no batch can still use it. A newer record supersedes a
load still under way: its cancel event is set (a download checks it and stops)
and :meth:`LiveSwap.submit` hands back what was superseded, to report; if it was
already running, whatever it still makes is retired as it ends, so its
connections are closed like a replaced version's. A load that fails leaves the
current version in place.

What the records mean, what a version is, and what is reported stays with each
streamlet; this is the one copy of the mechanism.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["LiveSwap", "Swapped"]

S = TypeVar("S")  # what a control record asks for (a descriptor, settings)
L = TypeVar("L")  # what loading it makes (a loaded model, a reference and its client)


@dataclasses.dataclass(frozen=True)
class Swapped(Generic[S, L]):
    """A load that finished: what was asked, and what it made or why it failed."""

    spec: S
    loaded: L | None
    error: Exception | None = None


@dataclasses.dataclass(frozen=True)
class _Pending(Generic[S, L]):
    spec: S
    future: concurrent.futures.Future[L]
    cancelled: threading.Event


class LiveSwap(Generic[S, L]):
    """Holds the current version, the one loading, and those replaced but not yet closed."""

    def __init__(
        self,
        load: Callable[[S, threading.Event], L],
        *,
        close: Callable[[L], Awaitable[None]],
        thread_name: str,
        workers: int = 1,
    ) -> None:
        """``load`` runs on a worker thread and raises on failure; ``close`` releases what a
        load made. More than one worker lets a superseded load wind down beside the next."""
        self.current: L | None = None
        self._load = load
        self._close = close
        self._pending: _Pending[S, L] | None = None
        self._retired: list[L] = []
        self._retiring = threading.Lock()  # superseded loads retire from their worker
        self._workers = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix=thread_name
        )

    @property
    def pending(self) -> S | None:
        """What is loading now, if anything."""
        return self._pending.spec if self._pending else None

    def submit(self, spec: S) -> S | None:
        """Start loading ``spec``; what it superseded (a load still under way), if any."""
        superseded = self.cancel()  # running: what it makes goes too
        cancelled = threading.Event()
        future = self._workers.submit(self._load, spec, cancelled)
        self._pending = _Pending(spec, future, cancelled)
        return superseded

    def poll(self) -> Swapped[S, L] | None:
        """Between batches: the load that finished since, swapped in when it succeeded.

        None while nothing finished. A failed load leaves ``current`` as it was.
        """
        pending = self._pending
        if pending is None or not pending.future.done():
            return None
        self._pending = None
        try:
            loaded = pending.future.result()
        except Exception as exc:
            return Swapped(pending.spec, None, exc)
        if self.current is not None:
            with self._retiring:
                self._retired.append(self.current)
        self.current = loaded
        return Swapped(pending.spec, loaded)

    def adopt(self, loaded: L) -> None:
        """Make ``loaded`` (made by another swap: a candidate promoted) current at once,
        between batches; the one it replaces is retired."""
        if self.current is not None and self.current is not loaded:
            with self._retiring:
                self._retired.append(self.current)
        self.current = loaded

    def drop(self) -> L | None:
        """Between batches: no version any more (a candidate that leaves). A load under
        way is cancelled; the current one is handed back, to :meth:`retire` or to adopt
        elsewhere."""
        self.cancel()
        current, self.current = self.current, None
        return current

    def cancel(self) -> S | None:
        """Stop the load under way, if any (what it still makes is retired); its spec."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        pending.cancelled.set()
        if not pending.future.cancel():
            pending.future.add_done_callback(self._abandoned)
        return pending.spec

    def retire(self, loaded: L) -> None:
        """Close ``loaded`` with the next :meth:`close_retired`."""
        with self._retiring:
            self._retired.append(loaded)

    async def close_retired(self) -> None:
        """Close what was replaced; call it at the start of a batch, on the event loop."""
        with self._retiring:
            retired, self._retired = self._retired, []
        for old in retired:
            await self._close(old)

    async def close(self) -> None:
        """At shutdown: the retired and the current version."""
        await self.close_retired()
        if self.current is not None:
            await self._close(self.current)

    def _abandoned(self, future: concurrent.futures.Future[L]) -> None:
        """A superseded load that ended (on its worker): what it made is retired."""
        if not future.cancelled() and future.exception() is None:
            with self._retiring:
                self._retired.append(future.result())

    def shutdown(self) -> None:
        """Stop the workers; a load under way is abandoned."""
        if self._pending is not None:
            self._pending.cancelled.set()
        self._workers.shutdown(wait=False, cancel_futures=True)
