"""The replica's HTTP endpoints (``/healthz``, ``/readyz``, ``/metrics``) and its liveness.

A small threaded HTTP server from the standard library: it must keep
answering while the processing loop is busy, and it needs no framework.

*Readiness* means partitions are assigned, control inlets have caught up, and
the streamlet accepts data. *Liveness* means the replica makes progress when it
has work, which is what a restart can fix. It fails in two ways:

* the loop has not turned for ``stall_after``: it is stuck inside one step (the
  streamlet's logic, a Kafka call), and the reason names that step;
* records wait for it (its consumer lag, while a broker is up) and none has been
  consumed for ``stall_after``, although the loop turns: a wedged consumer.

Waiting on a dependency is not being stuck: a streamlet that backs off, has no
model yet, or waits for the registry marks itself as progressing. Before the
loop's first turn (the streamlet's ``setup``, a model being loaded) nothing is
judged: a slow start is not a stall.

A :class:`LivenessWatch` thread logs once when the replica stops being live,
with the reason and the main thread's stack, and once when it recovers, so the
log says why it was restarted.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streamflow.runtime.metrics import Metrics

__all__ = ["DEFAULT_STALL_AFTER_S", "HealthServer", "HealthState", "Liveness", "LivenessWatch"]

log = logging.getLogger("streamflow.runtime.health")

DEFAULT_STALL_AFTER_S = 60.0


@dataclass(frozen=True)
class Liveness:
    alive: bool
    reason: str = ""  # why not, for people: the step it is stuck in, or the records waiting

    def to_json(self) -> dict[str, Any]:
        return {"alive": self.alive, **({"reason": self.reason} if self.reason else {})}


class HealthState:
    """What the loop reports; read by the HTTP threads and the watch."""

    def __init__(
        self,
        *,
        stall_after: float = DEFAULT_STALL_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ready = False
        self._reasons: list[str] = ["starting"]
        # what the replica depends on and cannot reach now ("kafka": why), whatever its loop says
        self._down: dict[str, str] = {}
        self.details: dict[str, Any] = {}
        self.stall_after = stall_after
        self._clock = clock
        now = clock()
        self.started = False  # the loop has turned once: from then on, stalls count
        self.last_turn = now
        self.last_progress = now
        self.activity = "starting"  # the step the loop is in now
        self.activity_since = now
        self.waiting = 0  # records known to wait for this replica (its lag)

    def turned(self) -> None:
        """The loop begins a turn: it is not stuck in a step."""
        now = self._clock()
        self.started = True
        self.last_turn = self.activity_since = now
        self.activity = "waiting for records"

    def doing(self, activity: str) -> None:
        """The loop enters a step that a stall would be reported in."""
        self.activity, self.activity_since = activity, self._clock()

    def progressed(self) -> None:
        """Records were taken, or the replica waits on a dependency (not on itself)."""
        self.last_progress = self._clock()

    def backlog(self, records: int) -> None:
        """How many records wait for this replica: its lag, 0 while no broker is up."""
        if records <= 0 < self.waiting:
            self.last_progress = self._clock()  # caught up
        self.waiting = max(records, 0)

    def set_ready(self, ready: bool, reasons: list[str] | None = None) -> None:
        """What the loop says of itself (a dependency that is down is told apart)."""
        self._ready = ready
        self._reasons = [] if ready else (reasons or ["not ready"])

    def dependency_down(self, name: str, reason: str | None) -> None:
        """``name`` cannot be reached (``reason``), or can again (None): not ready meanwhile."""
        if reason is None:
            self._down.pop(name, None)
        else:
            self._down[name] = reason

    @property
    def ready(self) -> bool:
        return self._ready and not self._down

    @property
    def reasons(self) -> list[str]:
        return [*self._down.values(), *self._reasons]

    def liveness(self) -> Liveness:
        if not self.started:
            return Liveness(True)
        now = self._clock()
        stuck = now - self.last_turn
        if stuck >= self.stall_after:
            limit = f"stall_after {self.stall_after:g}s"
            return Liveness(False, f"stuck for {stuck:.0f}s in {self.activity} ({limit})")
        idle = now - self.last_progress
        if self.waiting > 0 and idle >= self.stall_after:
            return Liveness(
                False,
                f"{self.waiting} records wait but none was taken for {idle:.0f}s "
                f"(stall_after {self.stall_after:g}s)",
            )
        return Liveness(True)

    def alive(self) -> bool:
        return self.liveness().alive


class LivenessWatch:
    """Logs when the replica stops being live (why, and where the loop is), and when it is again."""

    def __init__(
        self,
        state: HealthState,
        *,
        thread_id: int | None = None,  # the loop's thread; default: the one creating the watch
        every: float = 1.0,
    ) -> None:
        self._state = state
        self._thread_id = thread_id if thread_id is not None else threading.get_ident()
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="liveness-watch", daemon=True)
        self.reported: Liveness | None = None  # the failure last logged, None while live

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def check(self) -> None:
        verdict = self._state.liveness()
        if not verdict.alive and self.reported is None:
            self.reported = verdict
            log.error(
                "not live: %s; a supervisor will restart this replica. The loop is at:\n%s",
                verdict.reason,
                self._stack(),
                extra={"liveness": "failed", "reason": verdict.reason},
            )
        elif verdict.alive and self.reported is not None:
            self.reported = None
            log.warning("live again (progressing)", extra={"liveness": "recovered"})

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.check()

    def _stack(self) -> str:
        frame = sys._current_frames().get(self._thread_id)
        if frame is None:
            return "  (the loop's thread has ended)"
        return "".join(traceback.format_stack(frame)).rstrip()


class HealthServer:
    def __init__(
        self, *, state: HealthState, metrics: Metrics, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        handler = _handler(state, metrics)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _healthz(state: HealthState) -> tuple[int, str, bytes]:
    verdict = state.liveness()
    return _json(200 if verdict.alive else 503, verdict.to_json())


def _handler(state: HealthState, metrics: Metrics) -> Callable[..., BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
        "/healthz": lambda: _healthz(state),
        "/readyz": lambda: _json(
            200 if state.ready else 503,
            {"ready": state.ready, "reasons": state.reasons, **state.details},
        ),
        "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(metrics.registry)),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            status, ctype, body = route() if route else _json(404, {"error": "not found"})
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                # a probe that gave up (timed out on a loaded machine) hung up: nothing to
                # answer, and no traceback in the replica's log
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def _json(status: int, body: dict[str, Any]) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body).encode()
