"""The HTTP ingress's server: uvicorn, inside the replica's own event loop.

The ingress is exposed to whoever can reach its port, so the protocol layer is
a well-kept server rather than one of our own: uvicorn (over h11) brings
keep-alive, pipelining, ``Expect: 100-continue``, head size limits, a
concurrency limit with ``503``, and a graceful shutdown. It runs in the loop
that ``serve()`` runs in, because that loop is the one the Kafka emitter
resolves acknowledgements on. It is stopped the way uvicorn documents for
embedding (``should_exit``), and never captures signals: the replica owns
SIGTERM and cancels ``serve()`` on it.

What uvicorn leaves open is added around it, no more:

* deadlines on the request head and on its first line (:mod:`streamflow.runtime.httpguard`),
  and caps on connections, in all and per client, that answer at once past
  them (``503``, ``429``);
* the cap is kept under the process's descriptor limit, so a flood of
  half-open connections cannot make ``accept()`` run out of descriptors;
* should ``accept()`` fail anyway (descriptors taken by something else),
  asyncio already retries after a pause, but logs every failed attempt: the
  log is kept to one line per :data:`_ACCEPT_LOG_EVERY` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from streamflow.runtime import httpguard
from streamflow.streamlets.io import _httpapp

__all__ = ["HttpServer"]

_BACKLOG = 128
_RESERVED_DESCRIPTORS = 64  # for Kafka, logs, the health server, and what asyncio accepts at once
_HEAD_BYTES = 65536
_ACCEPT_LOG_EVERY = 10.0
_ACCEPT_FAILED = "socket.accept() out of system resource"


class HttpServer:
    """Serves an ASGI app on ``host:port`` (0: any free port) until :meth:`close`."""

    def __init__(
        self,
        app: _httpapp.App,
        *,
        host: str,
        port: int,
        logger: logging.Logger,
        max_connections: int,
        max_connections_per_client: int,
        header_timeout: float,
        request_line_timeout: float,
        idle_timeout: float,
        shutdown_grace: float = 10.0,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.logger = logger
        self.max_connections = _under_descriptor_limit(max_connections, logger)
        self.max_connections_per_client = min(max_connections_per_client, self.max_connections)
        self.header_timeout = header_timeout
        self.request_line_timeout = request_line_timeout
        self.idle_timeout = idle_timeout
        self.shutdown_grace = shutdown_grace
        self._server: _Embedded | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None
        self._restore_handler: Any = None
        self._handler_replaced = False

    async def start(self) -> int:
        """Start listening; returns the bound port."""
        config = uvicorn.Config(
            self._closing_aware(self.app),
            interface="asgi3",
            http=httpguard.guarded_protocol(
                header_timeout=self.header_timeout,
                request_line_timeout=self.request_line_timeout,
                max_connections=self.max_connections,
                max_connections_per_client=self.max_connections_per_client,
                logger=self.logger,
            ),
            ws="none",
            lifespan="off",
            log_config=None,  # the replica owns logging; uvicorn must not reconfigure it
            access_log=False,
            proxy_headers=False,
            server_header=False,
            # uvicorn counts the connection asking too; ours refuses past max_connections at once.
            limit_concurrency=self.max_connections + 1,
            timeout_keep_alive=max(1, round(self.idle_timeout)),
            timeout_graceful_shutdown=max(1, round(self.shutdown_grace)),
            h11_max_incomplete_event_size=_HEAD_BYTES,
            backlog=_BACKLOG,
        )
        # Whatever stops it before it listens (uvicorn failing, or SIGTERM cancelling serve()
        # now) must not leave the socket bound, uvicorn's task running or our handler on.
        try:
            self._socket = _bind(self.host, self.port)
            self._throttle_accept_errors()
            self._server = _Embedded(config)
            self._task = asyncio.get_running_loop().create_task(
                self._server.serve(sockets=[self._socket])
            )
            while not self._server.started:
                if self._task.done():
                    self._task.result()  # it failed to start: say why
                    raise RuntimeError("the HTTP server stopped while starting")
                await asyncio.sleep(0.01)
        except BaseException:
            await self._abandon()
            raise
        return int(self._socket.getsockname()[1])

    async def close(self) -> None:
        """Stop accepting, let requests in flight finish (up to the grace), close the rest."""
        task, self._task = self._task, None
        try:
            if self._server is not None and task is not None:
                self._server.should_exit = True
                await asyncio.shield(task)
        finally:
            self._release()

    async def _abandon(self) -> None:
        """Undo a start that never finished: no request was served, so nothing is graceful."""
        task, self._task = self._task, None
        try:
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task})
        finally:
            # A cancelled uvicorn skips its shutdown, so its listeners are closed here.
            for listener in getattr(self._server, "servers", ()):
                listener.close()
            self._release()

    def _release(self) -> None:
        """Close the socket and put the loop's exception handler back, once."""
        if self._socket is not None:
            if self._socket.fileno() != -1:  # uvicorn's shutdown closes it itself
                # A listener asyncio started serving, but uvicorn never recorded, reads it.
                asyncio.get_running_loop().remove_reader(self._socket)
            self._socket.close()
            self._socket = None
        if self._handler_replaced:
            asyncio.get_running_loop().set_exception_handler(self._restore_handler)
            self._handler_replaced = False

    def _closing_aware(self, app: _httpapp.App) -> _httpapp.App:
        """``app``, whose answers say ``Connection: close`` once shutdown began."""

        async def wrapped(
            scope: dict[str, Any], receive: _httpapp.Receive, send: _httpapp.Send
        ) -> None:
            async def send_closing(message: dict[str, Any]) -> None:
                closing = self._server is not None and self._server.should_exit
                if closing and message["type"] == "http.response.start":
                    headers = [h for h in message["headers"] if h[0].lower() != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
                await send(message)

            await app(scope, receive, send_closing)

        return wrapped

    def _throttle_accept_errors(self) -> None:
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()
        self._restore_handler = previous
        last = -_ACCEPT_LOG_EVERY
        suppressed = 0

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            nonlocal last, suppressed
            if context.get("message") == _ACCEPT_FAILED:
                if loop.time() - last < _ACCEPT_LOG_EVERY:
                    suppressed += 1
                    return
                last, count, suppressed = loop.time(), suppressed, 0
                self.logger.error(
                    "cannot accept connections: %s (%d more since the last report); "
                    "asyncio retries after a pause",
                    context.get("exception"),
                    count,
                )
                return
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handler)
        self._handler_replaced = True


class _Embedded(uvicorn.Server):
    """uvicorn's server, minus the signal handlers: the replica installed its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket of our own, so the bound port is known before uvicorn starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say they are
    # TCP, and without it every answer of a kept-alive connection waits for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _under_descriptor_limit(wanted: int, logger: logging.Logger) -> int:
    """``wanted``, lowered to what the process's descriptor limit can hold with room to spare."""
    try:
        import resource
    except ImportError:  # not on this platform: nothing to read
        return wanted
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    room = max(1, soft - _RESERVED_DESCRIPTORS - _BACKLOG)
    if wanted > room:
        logger.warning(
            "max_connections %d lowered to %d: the process may open %d descriptors "
            "(raise it with ulimit -n)",
            wanted,
            room,
            soft,
        )
        return room
    return wanted
