"""The watchdog of a transactional call: the process ends when one outlives its timeout.

Kept apart from the delivery guarantees that use it (:mod:`streamflow.runtime.delivery`
re-exports it), so that module holds the guarantees themselves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["CallWatchdog"]

log = logging.getLogger("streamflow.runtime")


class CallWatchdog:
    """Ends the process when a client call outlives its own timeout by ``grace_s``.

    librdkafka bounds its transactional calls with the timeout it is given, but a
    broker restart has left ``send_offsets_to_transaction`` blocked for minutes past
    it (librdkafka 2.16). A replica stuck in C cannot be unstuck from Python, so a
    thread watches the call in progress and, past the deadline, logs what was stuck
    and exits with ``EXIT_STUCK``: the supervisor or Kubernetes starts a fresh one,
    which resumes from the committed offsets.

    The grace is what bounds exactly-once recovery after a broker or network fault:
    a stuck replica ends within the call's timeout (``transaction.timeout.ms``, 10 s)
    plus ``GRACE_S`` plus one poll, and its replacement starts after the supervisor's
    backoff (1 s). When librdkafka works it ends its calls within milliseconds of
    their timeout, so 5 s waits only for a call that is truly stuck (15 s before).
    """

    EXIT_STUCK = 70
    GRACE_S = 5.0
    POLL_S = 1.0

    def __init__(
        self,
        *,
        grace_s: float = GRACE_S,
        clock: Callable[[], float] = time.monotonic,
        exit: Callable[[int], Any] = os._exit,
        poll_s: float = POLL_S,
    ) -> None:
        self.grace_s = grace_s
        self._clock, self._exit, self._poll_s = clock, exit, poll_s
        self._call: tuple[str, float, float] | None = None  # (what, started, deadline)
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def bounded(self, what: str, timeout_s: float) -> Iterator[None]:
        """Watch one call that librdkafka should end within ``timeout_s``."""
        if self._thread is None and self._exit is os._exit:
            self._thread = threading.Thread(target=self._watch, name="call-watchdog", daemon=True)
            self._thread.start()
        now = self._clock()
        self._call = (what, now, now + timeout_s + self.grace_s)
        try:
            yield
        finally:
            self._call = None

    def check(self) -> None:
        """Exit if the call in progress is past its deadline (the thread calls this)."""
        call = self._call
        if call is not None and self._clock() > call[2]:
            what, started, _ = call
            log.critical(
                "%s has not returned after %.0fs, past its own timeout: the Kafka client "
                "is stuck; exiting so that a fresh replica resumes from the committed offsets",
                what,
                self._clock() - started,
            )
            logging.shutdown()
            self._exit(self.EXIT_STUCK)

    def _watch(self) -> None:
        while True:
            time.sleep(self._poll_s)
            self.check()
