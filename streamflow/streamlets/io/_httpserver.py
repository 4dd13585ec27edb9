"""A small HTTP/1.1 server: asyncio streams for I/O, h11 for the protocol.

The HTTP ingress needs very little of a web framework (a few routes, JSON in
and out) but must get the protocol right: keep-alive, ``Content-Length`` and
chunked bodies, ``Expect: 100-continue``, pipelining, malformed requests.
h11 is a small, well-tested state machine that does exactly that and no I/O;
it comes with httpx, which the project already depends on, so no web server
(uvicorn, aiohttp) is added for one streamlet.

Bodies are capped twice: a declared ``Content-Length`` over the limit is
refused before anything is read, and a chunked body is refused as soon as
what was read passes the limit. A refused body is never drained, so the
connection is closed after the answer.

Shutdown stops accepting at once, closes idle connections, and gives requests
in flight ``shutdown_grace`` seconds to be answered (with ``Connection:
close``) before they are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import h11

__all__ = ["HttpServer", "Request", "Response"]

_READ_SIZE = 65536
_MAX_HEAD_BYTES = 65536
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes = b""
    query: str = ""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"

    @classmethod
    def json(cls, status: int, doc: Any, *, headers: tuple[tuple[str, str], ...] = ()) -> Response:
        return cls(status, json.dumps(doc, separators=(",", ":")).encode() + b"\n", headers)


Handler = Callable[[Request], Awaitable[Response]]


class _BodyTooLarge(Exception):
    pass


class HttpServer:
    """Serves ``handler`` on ``host:port`` (0: any free port) until :meth:`close`."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str,
        port: int,
        max_body_bytes: int,
        logger: logging.Logger,
        idle_timeout: float = 60.0,
        read_timeout: float = 30.0,
        shutdown_grace: float = 10.0,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.logger = logger
        self.idle_timeout = idle_timeout
        self.read_timeout = read_timeout
        self.shutdown_grace = shutdown_grace
        self.closing = False
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()

    async def start(self) -> int:
        """Start listening; returns the bound port."""
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop accepting, let requests in flight finish (up to the grace), close the rest."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            if not connection.busy:
                connection.task.cancel()
        tasks = [c.task for c in self._connections]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.shutdown_grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback that starts a task of our own: asyncio (3.11) logs a cancelled
        # coroutine callback as an error, and a cancelled idle connection is routine here.
        if self.closing:
            writer.close()
            return
        connection = _Connection(self, reader, writer)
        self._connections.add(connection)
        connection.task.add_done_callback(lambda _: self._connections.discard(connection))


class _Connection:
    """One client connection: requests answered in order, until either side closes."""

    def __init__(
        self, server: HttpServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.busy = False
        self.protocol = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD_BYTES)
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        try:
            await self._serve_requests()
        except h11.RemoteProtocolError as exc:
            await self._refuse(exc.error_status_hint, "bad-request", f"malformed HTTP: {exc}")
        except _BodyTooLarge:
            limit = self.server.max_body_bytes
            await self._refuse(413, "too-large", f"the body is larger than {limit} bytes")
        except (ConnectionError, TimeoutError):
            pass  # the client went away, or stalled mid-request: nothing to answer
        except Exception:
            self.server.logger.exception("HTTP connection failed")
        finally:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _serve_requests(self) -> None:
        while not self.server.closing:
            request = await self._read_request()
            if request is None:
                return
            await self._send(request, await self._answer(request))
            self.busy = False
            if self.protocol.our_state is not h11.DONE or self.protocol.their_state is not h11.DONE:
                return
            self.protocol.start_next_cycle()

    async def _read_request(self) -> Request | None:
        event = await self._next_event(self.server.idle_timeout, idle=True)
        if not isinstance(event, h11.Request):
            return None
        self.busy = True  # from here on, shutdown waits for the answer
        self._check_declared_length(event)
        if self.protocol.they_are_waiting_for_100_continue:
            self._write(h11.InformationalResponse(status_code=100, headers=[]))
        body = await self._read_body()
        if body is None:
            return None
        target = event.target.decode("latin-1")
        path, _, query = target.partition("?")
        return Request(
            method=event.method.decode("ascii"),
            path=path,
            headers=_headers(event.headers),
            body=body,
            query=query,
        )

    def _check_declared_length(self, event: h11.Request) -> None:
        for name, value in event.headers:
            if name == b"content-length" and int(value) > self.server.max_body_bytes:
                raise _BodyTooLarge

    async def _read_body(self) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self._next_event(self.server.read_timeout)
            if isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            if not isinstance(event, h11.Data):
                return None
            size += len(event.data)
            if size > self.server.max_body_bytes:
                raise _BodyTooLarge
            chunks.append(bytes(event.data))

    async def _next_event(self, timeout: float, *, idle: bool = False) -> Any:
        while True:
            event = self.protocol.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await asyncio.wait_for(self.reader.read(_READ_SIZE), timeout)
            except TimeoutError:
                if idle:
                    return h11.ConnectionClosed()
                raise
            self.protocol.receive_data(data)

    async def _answer(self, request: Request) -> Response:
        try:
            return await self.server.handler(request)
        except Exception:
            self.server.logger.exception("%s %s failed", request.method, request.path)
            return Response.json(500, {"error": "internal", "message": "internal server error"})

    async def _send(self, request: Request, response: Response) -> None:
        body = b"" if request.method == "HEAD" else response.body
        self._write(self._head(response, len(response.body)))
        if body:
            self._write(h11.Data(data=body))
        self._write(h11.EndOfMessage())
        await self.writer.drain()

    def _head(self, response: Response, length: int, *, close: bool = False) -> h11.Response:
        headers = [
            ("content-type", response.content_type),
            ("content-length", str(length)),
            *response.headers,
        ]
        if close or self.server.closing:
            headers.append(("connection", "close"))
        return h11.Response(status_code=response.status, headers=headers)

    async def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer an error the protocol layer found; the connection is closed after it."""
        if self.protocol.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        response = Response.json(status, {"error": code, "message": message})
        with contextlib.suppress(Exception):
            self._write(self._head(response, len(response.body), close=True))
            self._write(h11.Data(data=response.body))
            self._write(h11.EndOfMessage())
            await self.writer.drain()
            await self._linger()

    async def _linger(self) -> None:
        """Read and discard what the client still sends, for a while, before closing.

        Closing a socket with unread input resets the connection, and the client
        (still uploading the body we refused) may then never see our answer.
        """
        if self.writer.can_write_eof():
            self.writer.write_eof()
        discarded = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _LINGER_SECONDS
        while discarded < _LINGER_BYTES and loop.time() < deadline:
            data = await asyncio.wait_for(self.reader.read(_READ_SIZE), deadline - loop.time())
            if not data:
                return
            discarded += len(data)

    def _write(self, event: Any) -> None:
        data = self.protocol.send(event)
        if data:
            self.writer.write(data)


def _headers(raw: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out
