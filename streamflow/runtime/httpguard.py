"""What uvicorn's HTTP/1.1 protocol lacks against slow and numerous clients.

uvicorn bounds the *idle* time of a kept-alive connection, but from the moment
a connection opens until the request head is complete there is no deadline at
all: a client sending a header byte every few seconds holds its connection (and
a descriptor) for as long as it likes, and a few hundred such clients exhaust
the process. The guards close that, each where uvicorn's own protocol class is
the only place that sees it (``Config(http=...)`` takes a class):

* **a head deadline**: every request head, on a new connection or a kept-alive
  one, must be complete within ``header_timeout`` *in total*; past it the
  client is answered ``408`` and the connection closed;
* **a request-line deadline**: the head's first line must be complete within
  ``request_line_timeout``, far shorter, so a connection that says nothing (or
  half a line) gives its slot back in seconds rather than at the head deadline;
* **connection slots**: at most ``max_connections`` held in all (``503`` with
  ``Retry-After`` past it), and at most ``max_connections_per_client`` by one
  client (``429``), so one address cannot take every slot. A connection is
  answered as soon as it is accepted and closed, so its descriptor is back at
  once: uvicorn's ``limit_concurrency`` only answers once a head is complete,
  which a half-open one never is. Only connections let in hold a slot; one
  being refused does not, so a burst of refusals cannot crowd out others.

A client is its IPv4 address, or its IPv6 ``/64`` (one subscriber's network is
routinely a whole ``/64``; counting its single addresses would give it 2**64
shares). Refusals past the per-client share are logged, once per
:data:`_REPORT_EVERY` seconds at most: behind a proxy every client has the
proxy's address, and the log is where that shows.

The body's deadline is the application's (the HTTP ingress's ``_httpapp``),
where the answer can be a proper ``408``. Every HTTP server streamflow runs on
uvicorn takes this protocol: the HTTP ingress, and the web view (``streamflow
ui``, the operator's ``--ui-port``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import time
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["client_key", "guarded_protocol"]

_REPORT_EVERY = 10.0


def guarded_protocol(
    *,
    header_timeout: float,
    request_line_timeout: float,
    max_connections: int,
    max_connections_per_client: int,
    logger: logging.Logger,
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with head and request-line deadlines, and connection slots."""
    slots = _Slots(total=max_connections, per_client=max_connections_per_client, logger=logger)

    class Guarded(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None
        _line_deadline: asyncio.TimerHandle | None = None
        _client: str | None = None  # set while the connection holds a slot

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            client = client_key(transport.get_extra_info("peername"))
            refusal = slots.take(client)
            if refusal is not None:
                _refuse(self.transport, refusal)
                return
            self._client = client
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                if self._head_deadline is None:
                    self._arm()  # the first bytes of a kept-alive connection's next request
                if b"\n" in data:
                    _cancel(self._line_deadline)  # a whole line came: the head deadline is left
                    self._line_deadline = None
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the head is complete: the body has its own deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._client is not None:
                slots.give_back(self._client)
                self._client = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_deadline = self.loop.call_later(header_timeout, self._too_slow, "head")
            self._line_deadline = self.loop.call_later(request_line_timeout, self._too_slow, "line")

        def _disarm(self) -> None:
            _cancel(self._head_deadline)
            _cancel(self._line_deadline)
            self._head_deadline = self._line_deadline = None

        def _too_slow(self, what: str) -> None:
            if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
                return
            self._disarm()
            if what == "line":
                message = f"no complete request line arrived within {request_line_timeout:g}s"
            else:
                message = f"the request head did not arrive within {header_timeout:g}s"
            _refuse(self.transport, _Refusal(408, "request-timeout", message))

    return Guarded


def client_key(peername: object) -> str:
    """The client a connection counts against: its IPv4 address, or its IPv6 ``/64``."""
    if not isinstance(peername, tuple) or not peername or not isinstance(peername[0], str):
        return "unknown"  # the peer was gone before it was asked: it holds nothing for long
    try:
        address = ipaddress.ip_address(peername[0])
    except ValueError:
        return peername[0]
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    network = (int(address) >> 64) << 64  # by its integer: a scope (``%eth0``) must not count
    return str(ipaddress.IPv6Network((network, 64)))


@dataclass(frozen=True, slots=True)
class _Refusal:
    status: int
    code: str
    message: str
    retry_after: int = 0


class _Slots:
    """The connection slots of one server: ``total`` in all, ``per_client`` for any client."""

    def __init__(self, *, total: int, per_client: int, logger: logging.Logger) -> None:
        self.total = total
        self.per_client = per_client
        self.logger = logger
        self.held: dict[str, int] = {}
        self.taken = 0
        self._reported_at = -math.inf
        self._unreported = 0

    def take(self, client: str) -> _Refusal | None:
        """A slot for ``client``, or why there is none."""
        held = self.held.get(client, 0)
        if held >= self.per_client:
            self._report(client)
            message = f"your address holds {held} connections already, the most one may hold"
            return _Refusal(429, "too-many-connections", message, retry_after=1)
        if self.taken >= self.total:
            return _Refusal(503, "unavailable", "too many connections; retry later", 1)
        self.held[client] = held + 1
        self.taken += 1
        return None

    def give_back(self, client: str) -> None:
        self.taken -= 1
        held = self.held.pop(client) - 1
        if held:
            self.held[client] = held

    def _report(self, client: str) -> None:
        now = time.monotonic()
        if now - self._reported_at < _REPORT_EVERY:
            self._unreported += 1
            return
        self.logger.warning(
            "refusing connections from %s: it holds max_connections_per_client (%d) "
            "already (%d more refused since the last report); behind a proxy, every client "
            "has the proxy's address: raise max_connections_per_client",
            client,
            self.per_client,
            self._unreported,
        )
        self._reported_at, self._unreported = now, 0


def _cancel(handle: asyncio.TimerHandle | None) -> None:
    if handle is not None:
        handle.cancel()


_REASONS = {408: b"Request Timeout", 429: b"Too Many Requests", 503: b"Service Unavailable"}


def _refuse(transport: asyncio.Transport, refusal: _Refusal) -> None:
    """Answer outside any request cycle (none has started), then close the connection."""
    doc = {"error": refusal.code, "message": refusal.message}
    body = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
    head = [
        b"HTTP/1.1 %d %s" % (refusal.status, _REASONS[refusal.status]),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    if refusal.retry_after:
        head.append(b"retry-after: %d" % refusal.retry_after)
    transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    transport.close()
