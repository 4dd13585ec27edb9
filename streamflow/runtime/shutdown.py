"""Stopping within a bound, whatever Kafka does.

On SIGTERM or Ctrl-C a replica finishes its batch, hands Kafka what it holds,
and closes. With Kafka gone, handing over never ends by itself: librdkafka keeps
a record for ``message.timeout.ms`` (five minutes) and a transactional call for
its own timeout (a minute), while the local supervisor and Kubernetes kill the
replica at the end of its grace (30 s), nothing said. So from the stop request
on, every wait on Kafka shares one deadline, ``flush_timeout_s`` later: the
producer is flushed until then, an exactly-once replica commits only what Kafka
acknowledged by then and aborts otherwise, and a commit of consumer offsets
does not wait for a coordinator that is gone. What Kafka did not take is
counted, and the replica's last line says so::

    stopped: 412 records were not delivered (Kafka unreachable)

The bound: a replica ends within ``flush_timeout_s + CLOSE_MARGIN_S`` of the
signal (10 + 5 s by default, inside that 30 s grace). The margin is for closing
the clients and the streamlet's teardown. Two things make it hold even while
the loop is inside a call into librdkafka, where Python runs no signal handler:
the signal is also read from a wakeup pipe by a thread, which sets the stop
request at once (:func:`install_signal_handlers`), and :meth:`Stopping.watch`
ends the process at the bound should a call outlive its own timeout
(librdkafka#5456) or a teardown hang. Waits on Kafka are made in slices of
``SLICE_S``, so a stop request is seen within one.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "CLOSE_MARGIN_S",
    "FLUSH_TIMEOUT_S",
    "SLICE_S",
    "Overdue",
    "Stopping",
    "bound_s",
    "install_signal_handlers",
]

log = logging.getLogger("streamflow.runtime")

FLUSH_TIMEOUT_S = 10.0  # as long as an exactly-once transaction may take (transaction.timeout.ms)
CLOSE_MARGIN_S = 5.0
SLICE_S = 0.25
#: What a bounded close leaves of the margin, for the teardown and the last line.
CLOSE_RESERVE_S = 1.5


def bound_s(flush_timeout_s: float = FLUSH_TIMEOUT_S) -> float:
    """How long after the stop request a replica with this flush timeout has ended."""
    return flush_timeout_s + CLOSE_MARGIN_S


class Overdue(Exception):
    """The stop deadline passed while the replica waited on Kafka (for room in its queue)."""


class Flushable(Protocol):
    """What :meth:`Stopping.flush` needs of a producer."""

    def flush(self, timeout: float = ...) -> int: ...

    def __len__(self) -> int: ...


class Stopping:
    """A replica's stop request, its deadline, and what it could not deliver.

    ``stop`` is the replica's stop event. The deadline counts from the moment the
    request is first seen: by the signal's wakeup thread, the :meth:`watch` thread,
    or a wait on Kafka, whichever comes first.
    """

    EXIT_OVERRAN = 75  # ended by the watch: something ignored the deadline

    def __init__(
        self,
        stop: threading.Event | None = None,
        *,
        flush_timeout_s: float = FLUSH_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.stop = stop if stop is not None else threading.Event()
        self.flush_timeout_s = flush_timeout_s
        self._clock, self._exit = clock, exit
        self._since: float | None = None
        self._thread_id = threading.get_ident()  # the replica's loop, for the watch's report
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self.not_delivered = 0  # records Kafka did not get, as told by the replica's parts
        self.notes: list[str] = []  # what else the last line says (a transaction aborted)
        #: What is still not delivered right now, for the watch's line (a runner sets it).
        self.pending: Callable[[], int] = lambda: 0

    @property
    def bound_s(self) -> float:
        return bound_s(self.flush_timeout_s)

    @property
    def requested(self) -> bool:
        """Whether a stop is requested (and, the first time it is seen, from when)."""
        if self._since is None and self.stop.is_set():
            with self._lock:
                if self._since is None:
                    self._since = self._clock()
        return self._since is not None

    def left(self) -> float:
        """Seconds before the deadline; infinite while no stop is requested."""
        if not self.requested:
            return math.inf
        assert self._since is not None
        return max(0.0, self._since + self.flush_timeout_s - self._clock())

    @property
    def overdue(self) -> bool:
        return self.requested and self.left() <= 0

    def cap(self, timeout_s: float) -> float:
        """``timeout_s``, or less once the deadline is nearer."""
        return min(timeout_s, self.left())

    def flush(self, producer: Flushable, timeout_s: float | None = None) -> int:
        """Flush ``producer`` until it holds nothing, ``timeout_s`` has passed (None: no
        limit) or the stop deadline has; the records it still holds then."""
        deadline = math.inf if timeout_s is None else self._clock() + timeout_s
        while len(producer):
            wait = min(SLICE_S, deadline - self._clock(), self.left())
            producer.flush(max(wait, 0.0))  # once at least: it serves what is acknowledged
            if wait <= 0:
                return len(producer)
        return 0

    def close(self, what: str, close: Callable[[], object]) -> bool:
        """Call ``close`` (a Kafka client's), ending the wait by the bound after a stop request.

        With Kafka gone, closing a consumer can wait on its coordinator for longer
        than the margin the bound leaves: a final offset commit, leaving the group.
        Once a stop is requested the close runs on a thread of its own, and the
        replica goes on at ``bound_s - CLOSE_RESERVE_S`` after the request whether it
        has returned or not (the client is then left as it is; the process ends
        next). True when it returned; when not, the last line says so.
        """
        if not self.requested:
            close()
            return True
        assert self._since is not None
        done = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                close()
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name=f"close-{what}", daemon=True).start()
        if done.wait(max(0.0, self._since + self.bound_s - CLOSE_RESERVE_S - self._clock())):
            if failure:
                raise failure[0]
            return True
        log.warning("closing %s did not end in time (Kafka unreachable); going on", what)
        self.tell(0, f"{what} was left unclosed")
        return False

    def tell(self, not_delivered: int, *notes: str) -> None:
        """What a part of the replica gave up at its stop, for the last line."""
        self.not_delivered += not_delivered
        self.notes += [note for note in notes if note not in self.notes]

    def last_line(self) -> None:
        """The replica's last line: whether everything was delivered, and if not, how much
        was not; the watch then has nothing left to do."""
        self._ended.set()
        if not self.not_delivered and not self.notes:
            log.info("stopped cleanly")
            return
        lost = [_lost(self.not_delivered)] if self.not_delivered else []
        log.warning("stopped: %s", "; ".join([*lost, *self.notes]))

    def watch(self) -> None:
        """End the process ``bound_s`` after the stop request if it has not ended by then."""
        threading.Thread(target=self._watch, name="stop-watch", daemon=True).start()

    def _watch(self) -> None:
        self.stop.wait()
        self.requested  # noqa: B018 - the deadline counts from now at the latest
        assert self._since is not None
        if self._ended.wait(self._since + self.bound_s - self._clock()):
            return
        frame = sys._current_frames().get(self._thread_id)
        where = "".join(traceback.format_stack(frame)).rstrip() if frame else "(ended)"
        log.critical(
            "stopped: %s; a call into the Kafka client or the streamlet outlived the %gs "
            "bound of the stop, so the process ends here. The loop was at:\n%s",
            _lost(self.not_delivered + self.pending()),
            self.bound_s,
            where,
        )
        logging.shutdown()
        self._exit(self.EXIT_OVERRAN)


def _lost(records: int) -> str:
    were = "record was" if records == 1 else "records were"
    return f"{records} {were} not delivered (Kafka unreachable)"


def install_signal_handlers(stop: threading.Event, *, bound_s: float | None = None) -> None:
    """SIGTERM and SIGINT set ``stop`` at once, even while the loop is inside a Kafka call.

    Python runs a signal's handler on the main thread between two bytecodes: a loop
    blocked in librdkafka would hear of the signal only once the call returned. The
    signal is also written to a wakeup pipe (``signal.set_wakeup_fd``), which a
    thread reads, so the request is set, and told, when the signal arrives.
    """
    told = threading.Lock()

    def request(signum: int) -> None:
        if stop.is_set() or not told.acquire(blocking=False):
            return
        within = f" (ending within {bound_s:g}s, whatever Kafka does)" if bound_s else ""
        log.info("received %s; finishing the current batch%s", signal.Signals(signum).name, within)
        stop.set()

    signal.signal(signal.SIGTERM, lambda signum, frame: request(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: request(signum))
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: the handlers alone
        os.close(read)
        os.close(write)
        return

    def wakeups() -> None:
        while data := os.read(read, 16):
            for signum in data:
                if signum in (signal.SIGTERM, signal.SIGINT):
                    request(signum)

    threading.Thread(target=wakeups, name="signals", daemon=True).start()
