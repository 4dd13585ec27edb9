"""A tiny threaded HTTP server that plays the attacker's model host in the control-stream tests.

Each route answers in one hostile way: a fixed body with any status, a body
that drips one byte at a time, or a huge body streamed from nothing. The
server records every path it was asked for and how many body bytes it got out
before the client hung up, which is how the tests see that a replica never
called a host, or stopped reading early, without looking inside the replica.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

Route = Callable[["_Handler"], None]


class HostileServer:
    """Routes by exact path (``*`` answers every other path); 404 otherwise."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []
        self.sent: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def body(self, path: str, data: bytes, *, status: int = 200) -> None:
        def answer(h: _Handler) -> None:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        self.routes[path] = answer

    def drip(self, path: str, data: bytes, *, every: float) -> None:
        """The body one byte at a time, ``every`` seconds apart: each read succeeds, slowly."""

        def answer(h: _Handler) -> None:
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            for i in range(len(data)):
                h.wfile.write(data[i : i + 1])
                h.wfile.flush()
                self._count(path, 1)
                time.sleep(every)

        self.routes[path] = answer

    def huge(self, path: str, size: int, *, declare: bool = True) -> None:
        """``size`` zero bytes, streamed; without ``declare`` there is no Content-Length."""
        chunk = b"\0" * 65536

        def answer(h: _Handler) -> None:
            h.send_response(200)
            if declare:
                h.send_header("Content-Length", str(size))
            else:
                h.send_header("Connection", "close")
                h.close_connection = True
            h.end_headers()
            left = size
            while left > 0:
                piece = chunk[: min(left, len(chunk))]
                h.wfile.write(piece)
                self._count(path, len(piece))
                left -= len(piece)

        self.routes[path] = answer

    def bytes_sent(self, path: str) -> int:
        with self._lock:
            return self.sent.get(path, 0)

    def _count(self, path: str, n: int) -> None:
        with self._lock:
            self.sent[path] = self.sent.get(path, 0) + n

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        owner: HostileServer = self.server.owner  # type: ignore[attr-defined]
        owner.requests.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        route = owner.routes.get(self.path.split("?")[0]) or owner.routes.get("*")
        if route is None:
            self.send_error(404)
            return
        with contextlib.suppress(ConnectionError):  # the client hung up: that is the point
            route(self)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def hostile() -> Iterator[HostileServer]:
    server = HostileServer()
    try:
        yield server
    finally:
        server.stop()
