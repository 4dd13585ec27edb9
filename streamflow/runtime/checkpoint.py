"""Where a batch becomes final: its outputs, then its state, then its offsets.

The order is what lets a replica crash anywhere and, on its restart, repeat
only what the guarantee allows. A batch's outputs are produced first. Its state
stores' changes go to their changelogs after them: inside the batch's
transaction (exactly-once), or acknowledged before its offsets are stored
(at-least-once). Only then do its offsets move, through the delivery
(:mod:`~streamflow.runtime.delivery`, :mod:`~streamflow.runtime.transactions`).
A batch is told (its counts, its dead letters) once it is written, never
before: a batch that is retried is told once.

Under exactly-once a transaction costs the same few broker round trips whatever
it holds, so full batches (a sign of load) share one for up to the delivery's
``commit_interval_s`` (see :meth:`Checkpoint.holds`). It is committed as soon as
a batch is not full, the loop finds no input, an output outside the batches is
written, partitions are revoked or the loop stops (:meth:`Checkpoint.settle`).
When it aborts, every batch in it is handed back to be read again from its
first offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import Message

from streamflow.runtime.delivery import Delivery, Offsets
from streamflow.runtime.state.manager import StateManager
from streamflow.runtime.transactions import TransactionAborted

__all__ = ["Checkpoint", "Retry", "Tally"]


class Tally(NamedTuple):
    """What one batch tells once it is written: its counts, its time and its dead letters."""

    counts: dict[str, int]
    produced: dict[str, int]
    seconds: float
    n: int
    dead: list[Any]


# What to do with batches whose transaction aborted: read ``messages`` again, from the
# ``earlier`` offsets where the batches before them start (None: no earlier batches).
Retry = Callable[[list[Message], TransactionAborted, Offsets | None], None]


class Checkpoint:
    """Ends one replica's batches in order (see the module docstring)."""

    def __init__(
        self,
        *,
        delivery: Delivery,
        state: StateManager | None,
        batch_size: int,
        clock: Callable[[], float],
        told: Callable[[Tally], None],
        retry: Retry,
    ) -> None:
        self._delivery = delivery
        self._state = state
        self._batch_size = batch_size
        self._clock = clock
        self._told = told
        self._retry = retry
        # Batches sharing one open transaction (None: none is open), how long they may
        # (batches with state stores commit each: the stores' changelogs go with them), and
        # one that aborted inside a rebalance callback: its batches are read again once the
        # consume call that ran the callback returns.
        self._shared: _Shared | None = None
        self._share_s = delivery.commit_interval_s if state is None else 0.0
        self._aborted_in_rebalance: tuple[_Shared, TransactionAborted] | None = None

    def begin(self) -> None:
        """Before a batch writes anything: its transaction, unless it joins a shared one.
        ``TransactionAborted`` when it cannot begin: nothing was written, see :meth:`abandon`."""
        if self._shared is None:
            self._delivery.begin_batch()

    def end(
        self,
        messages: list[Message],
        starts: Offsets,
        offsets: Offsets,
        tally_of: Callable[[], Tally],
    ) -> None:
        """The batch's outputs are produced: its state follows them, then its offsets,
        unless its transaction stays open for the next full batch to share.

        ``starts`` is each partition's first offset in the batch, ``offsets`` each one's
        next offset after it; ``tally_of`` tells the batch once its state is written.
        """
        state = self._state
        shared = self._shared
        try:
            if state is not None and state.dirty:
                state.flush(self._delivery.produce_to)
            tally = tally_of()
            if self.holds(tally.n, shared):
                if shared is None:
                    shared = self._shared = _Shared(self._clock())
                shared.add(starts, offsets, tally)
                return
            if shared is not None:  # this batch ends the transaction the earlier ones share
                self._shared = None
                shared.add(starts, offsets, tally)
                offsets, messages = shared.offsets, []
        except TransactionAborted as aborted:
            self._shared = None  # aborted: what it held is never committed, only read again
            self.abandon(aborted, messages, shared)
            return
        try:
            self._delivery.end_batch(offsets)
        except TransactionAborted as aborted:
            self.abandon(aborted, messages, shared)
            return
        if state is not None:
            state.commit()
        for done in shared.tallies if shared is not None else (tally,):
            self._told(done)

    def holds(self, n: int, shared: _Shared | None) -> bool:
        """Whether a batch of ``n`` leaves its transaction open for the next batch to share.

        Only full batches do, and only for ``commit_interval_s`` from the first (exactly-once,
        without state stores: those commit with every batch). A full batch means more is
        queued, so under load a transaction's round trips are paid once per interval instead
        of once per batch; when the input is not keeping the loop busy, every batch commits
        at once and adds no latency.
        """
        if not self._share_s or n < self._batch_size:
            return False
        return shared is None or self._clock() - shared.since < self._share_s

    def settle(self, *, in_rebalance: bool = False) -> bool:
        """Commit the transaction full batches share, if one is open. False when it aborted:
        its batches are read again (after the consume call, ``in_rebalance``)."""
        shared = self._shared
        if shared is None:
            return True
        self._shared = None
        try:
            self._delivery.end_batch(shared.offsets)
        except TransactionAborted as aborted:
            if in_rebalance:
                self._aborted_in_rebalance = (shared, aborted)
            else:
                self.abandon(aborted, [], shared)
            return False
        for done in shared.tallies:
            self._told(done)
        return True

    def retry_aborted_in_rebalance(self, messages: list[Message]) -> bool:
        """After a consume call: whether a rebalance aborted the shared transaction in it.
        If so its batches, and ``messages`` (what the call took, past them), are read again."""
        aborted = self._aborted_in_rebalance
        if aborted is None:
            return False
        self._aborted_in_rebalance = None
        shared, exc = aborted
        self.abandon(exc, messages, shared)
        return True

    def abandon_open(self, aborted: TransactionAborted, messages: list[Message]) -> None:
        """A batch's write failed with ``aborted`` (its transaction could not begin, say):
        it is read again, with the batches that shared its transaction."""
        shared, self._shared = self._shared, None
        self.abandon(aborted, messages, shared)

    def abandon(
        self, aborted: TransactionAborted, messages: list[Message], shared: _Shared | None = None
    ) -> None:
        """Exactly-once: nothing of the transaction is visible and its offsets did not move,
        so every batch in it (``shared``'s), and ``messages`` after them, is read again."""
        self._retry(messages, aborted, shared.starts if shared is not None else None)

    def drop(self) -> None:
        """The loop ends without a commit (an error, or the stop deadline): the delivery's
        close aborts the open transaction, and nothing of it shows."""
        self._shared = None


class _Shared:
    """Full exactly-once batches sharing one open transaction (see ``Checkpoint.holds``)."""

    __slots__ = ("offsets", "since", "starts", "tallies")

    def __init__(self, since: float) -> None:
        self.since = since  # when the first batch was held (the processor's clock)
        self.offsets: Offsets = {}  # each partition's next offset, the latest batch's
        # Each partition's first offset in the transaction: where an abort rewinds to. Only
        # offsets are kept, not the messages: a transaction holds 10,000 records and more,
        # and their messages would keep librdkafka's fetch buffers alive until it commits.
        self.starts: Offsets = {}
        self.tallies: list[Tally] = []

    def add(self, starts: Offsets, offsets: Offsets, tally: Tally) -> None:
        for where, offset in starts.items():
            self.starts.setdefault(where, offset)
        self.offsets.update(offsets)
        self.tallies.append(tally)
