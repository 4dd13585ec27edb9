"""The replica's HTTP endpoints: ``/healthz``, ``/readyz`` and ``/metrics``.

A small threaded HTTP server from the standard library: it must keep
answering while the processing loop is busy, and it needs no framework.
Liveness means the loop is turning; readiness means partitions are assigned,
control inlets have caught up, and the streamlet accepts data.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streamflow.runtime.metrics import Metrics

__all__ = ["HealthServer", "HealthState"]


class HealthState:
    """What the loop reports; read by the HTTP threads."""

    def __init__(self, *, stall_after: float = 120.0) -> None:
        self.ready = False
        self.reasons: list[str] = ["starting"]
        self.details: dict[str, Any] = {}
        self.last_turn = time.monotonic()
        self.stall_after = stall_after

    def turned(self) -> None:
        self.last_turn = time.monotonic()

    def set_ready(self, ready: bool, reasons: list[str] | None = None) -> None:
        self.ready = ready
        self.reasons = [] if ready else (reasons or ["not ready"])

    def alive(self) -> bool:
        return time.monotonic() - self.last_turn < self.stall_after


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


def _handler(state: HealthState, metrics: Metrics) -> Callable[..., BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
        "/healthz": lambda: _json(200 if state.alive() else 503, {"alive": state.alive()}),
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
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def _json(status: int, body: dict[str, Any]) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body).encode()
