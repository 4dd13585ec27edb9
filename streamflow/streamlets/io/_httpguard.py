"""What uvicorn's HTTP/1.1 protocol lacks against slow and numerous clients.

uvicorn bounds the *idle* time of a kept-alive connection, but from the moment
bytes arrive until the request head is complete there is no deadline at all:
a client sending a header byte every few seconds holds its connection (and a
descriptor) for as long as it likes, and a few hundred such clients exhaust
the process. Two guards close that, each where uvicorn's own protocol class
is the only place that sees it (``Config(http=...)`` takes a class):

* **a head deadline**: every request head, on a new connection or a kept-alive
  one, must be complete within ``header_timeout`` *in total*; past it the
  client is answered ``408`` and the connection closed;
* **a connection cap**: a connection past ``max_connections`` is answered
  ``503`` with ``Retry-After`` as soon as it is accepted, and closed, so its
  descriptor is back at once. uvicorn's ``limit_concurrency`` only answers a
  connection once its head is complete, which a half-open one never is.

The body's deadline is the application's (:mod:`._httpapp`), where the
answer can be a proper ``408``.
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["guarded_protocol"]


def guarded_protocol(*, header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a head deadline and a hard connection cap."""

    class Guarded(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            if len(self.connections) > max_connections:
                _refuse(self.transport, 503, "unavailable", _BUSY, retry_after=1)
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._head_deadline is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the first bytes of a kept-alive connection's next request
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the head is complete: the body has its own deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_deadline = self.loop.call_later(header_timeout, self._head_too_slow)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_too_slow(self) -> None:
            self._head_deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                message = f"the request head did not arrive within {header_timeout:g}s"
                _refuse(self.transport, 408, "request-timeout", message)

    return Guarded


_BUSY = "too many connections; retry later"
_REASONS = {408: b"Request Timeout", 503: b"Service Unavailable"}


def _refuse(
    transport: asyncio.Transport, status: int, code: str, message: str, *, retry_after: int = 0
) -> None:
    """Answer outside any request cycle (none has started), then close the connection."""
    body = json.dumps({"error": code, "message": message}, separators=(",", ":")).encode() + b"\n"
    head = [
        b"HTTP/1.1 %d %s" % (status, _REASONS[status]),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    if retry_after:
        head.append(b"retry-after: %d" % retry_after)
    transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    transport.close()
