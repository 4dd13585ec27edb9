"""Kafka going away, told as an operator wants it: once, a summary a minute, once when back.

librdkafka logs every failed reconnect of every client: with the broker gone,
each replica's consumer, producer and control reader each add a line every
few hundred milliseconds (20,472 lines in four minutes for the wine example,
85 a second). :class:`KafkaWatch` sits on the ``streamflow.kafka`` logger,
where those lines arrive, and turns them into

* one WARNING when Kafka is first unreachable, with the cause and the clients
  affected;
* a WARNING summary every :attr:`KafkaWatch.summary_every` seconds while it
  lasts ("Kafka unreachable for 3 min, 212 connection attempts failed");
* one INFO when a client's statistics show a broker up again;

and shows the outage in the replica's readiness (``/readyz``, and so
``streamflow status``). Each failed attempt is still logged at DEBUG.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from streamflow.runtime.health import HealthState

__all__ = ["KafkaWatch", "is_connection_failure"]

log = logging.getLogger("streamflow.runtime")

SUMMARY_EVERY_S = 60.0
# A connection that could not be made: an outage starts (or goes on) with one.
_FAILURE = re.compile(
    r"Connect to .* failed|Connection refused|brokers are down|Broker transport failure|"
    r"Failed to resolve|timed out",
    re.IGNORECASE,
)
# A connection that dropped: part of an outage, but alone (an idle connection the
# broker closed) not one; outside an outage it is logged as librdkafka says it.
_DROPPED = re.compile(r"Disconnected|Connection reset", re.IGNORECASE)
_ROLE = re.compile(r"#(consumer|producer|admin)-\d+$")


def is_connection_failure(record: logging.LogRecord) -> bool:
    """Whether a librdkafka line reports a broker it cannot connect to."""
    return _kind(record) == "failed"


def _kind(record: logging.LogRecord) -> str | None:
    """``failed`` (a connection not made), ``dropped`` (one lost), or None (anything else)."""
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) != 3 or args[0] not in ("FAIL", "ERROR"):
        return None
    text = str(args[2])
    if _FAILURE.search(text):
        return "failed"
    return "dropped" if _DROPPED.search(text) else None


class KafkaWatch(logging.Filter):
    """Reports an unreachable Kafka once per outage, with a summary a minute; see the module."""

    def __init__(
        self,
        *,
        health: HealthState | None = None,
        summary_every: float = SUMMARY_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.health = health
        self.summary_every = summary_every
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self.since: float | None = None  # monotonic start of the outage; None: reachable
        self._since_wall = 0.0
        self.attempts = 0  # failed attempts in this outage
        self._last_summary = 0.0
        self._clients: set[str] = set()
        self._cause = ""

    @property
    def down(self) -> bool:
        return self.since is not None

    # -- librdkafka's log lines ------------------------------------------------------

    def filter(self, record: logging.LogRecord) -> bool:
        kind = _kind(record)
        if kind is None or (kind == "dropped" and self.since is None):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        client, text = str(args[1]), _cause(str(args[2]))
        with self._lock:
            now = self._clock()
            self.attempts += 1
            self._clients.add(_role(client))
            self._cause = text
            first = self.since is None
            if first:
                self.since, self._since_wall, self._last_summary = now, self._wall(), now
        if first:
            log.warning(
                "Kafka is unreachable: %s; the replica's clients retry until it is back (each "
                "attempt is logged at DEBUG, a summary every %s)",
                text,
                _duration(self.summary_every),
            )
            self._tell_health(text)
        else:
            self._summary_if_due()
        # the attempt itself: at DEBUG, as librdkafka's lines are when nothing is wrong
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    # -- a client's statistics: is a broker up? --------------------------------------

    def stats_cb(self, chained: Callable[[str], Any] | None = None) -> Callable[[str], None]:
        """A ``stats_cb`` that ends an outage when a broker is up (then calls ``chained``)."""

        def on_stats(stats_json: str) -> None:
            since = self.since
            if since is not None:
                if _any_broker_up(stats_json, self._clock() - since):
                    self.reachable()
                else:  # librdkafka may go quiet (it folds identical errors for 30 s)
                    self._summary_if_due()
            if chained is not None:
                chained(stats_json)

        return on_stats

    def _summary_if_due(self) -> None:
        """The outage's summary, when ``summary_every`` has passed since the last one: told
        on a client's log line or on its statistics (every few seconds), whichever comes."""
        with self._lock:
            now = self._clock()
            if self.since is None or now - self._last_summary < self.summary_every:
                return
            self._last_summary = now
            attempts, lasted, clients = self.attempts, now - self.since, sorted(self._clients)
            cause = self._cause
        log.warning(
            "Kafka unreachable for %s, %d connection attempts of the %s failed (last: %s)",
            _duration(lasted),
            attempts,
            _joined(clients),
            cause,
        )

    def reachable(self) -> None:
        """Kafka answers again: one line, and the readiness back."""
        with self._lock:
            if self.since is None:
                return
            lasted, attempts = self._clock() - self.since, self.attempts
            self.since, self.attempts, self._clients = None, 0, set()
        log.info(
            "Kafka is reachable again, after %s unreachable (%d connection attempts failed)",
            _duration(lasted),
            attempts,
        )
        if self.health is not None:
            self.health.dependency_down("kafka", None)

    def _tell_health(self, cause: str) -> None:
        if self.health is not None:
            since = time.strftime("%H:%M:%S", time.localtime(self._since_wall))
            self.health.dependency_down("kafka", f"Kafka unreachable since {since}: {cause}")


def _any_broker_up(stats_json: str, within_s: float) -> bool:
    """Whether a broker (not the bootstrap address) came up in the last ``within_s`` seconds:
    a statistics snapshot taken before the outage was noticed still says UP."""
    try:
        brokers = json.loads(stats_json).get("brokers") or {}
    except (ValueError, AttributeError):
        return False
    return any(
        isinstance(b, dict)
        and b.get("state") == "UP"
        and b.get("nodeid", -1) != -1
        and int(b.get("stateage", 0)) / 1e6 < within_s
        for b in brokers.values()
    )


def _cause(text: str) -> str:
    """``[thrd:...]: host:port/1: Connect to ipv4#... failed: Connection refused (after ...)``
    -> ``host:port: Connect to ipv4#... failed: Connection refused``."""
    text = re.sub(r"^\[thrd:[^\]]*\]:\s*", "", text)
    text = re.sub(r"^(\S+?)/(?:bootstrap|\d+):", r"\1:", text)
    return re.sub(r"\s*\(after \d+ms in state \w+\)", "", text).strip()


def _role(client: str) -> str:
    """``wine.classifier.0.control#consumer-4`` -> ``control reader``; ``...#producer-2`` ->
    ``producer``; a consumer otherwise."""
    found = _ROLE.search(client)
    kind = found.group(1) if found else "client"
    if kind == "consumer" and ".control" in client:
        return "control reader"
    return kind


def _joined(names: list[str]) -> str:
    if not names:
        return "clients"
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
