"""The ASGI side of the HTTP ingress: one request in, one answer out, within deadlines.

uvicorn parses HTTP and bounds what it can (the head's size, idle keep-alive,
concurrency); what it leaves to the application is how long a body may take
and how large it may be. Both are bounded here:

* the body has ``body_timeout`` *in total*, not per read: a client dripping a
  byte every second is answered ``408`` when the deadline passes, however
  steadily it sends;
* a declared ``Content-Length`` over ``max_body_bytes`` is refused before
  anything is read, a chunked body as soon as it passes the limit (``413``).

A refused body is not kept for: those answers carry ``Connection: close``.
Closing a socket with unread input resets it, and a client still uploading
would then never see the answer, so up to a bound (:data:`_LINGER_BYTES`,
:data:`_LINGER_SECONDS`) what it still sends is read and discarded first;
unless it asked ``Expect: 100-continue``, in which case it sent nothing yet.
Before the body is read, ``check`` may answer from the head alone (a wrong
route, a missing token, a wrong media type): nobody unauthenticated gets to
upload a megabyte, or to be told ``100 Continue``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Request", "Response", "asgi_app"]

_CLOSE = (("connection", "close"),)
_LINGER_BYTES = 8 * 1024 * 1024
_LINGER_SECONDS = 2.0


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


Check = Callable[[Request], "Response | None"]
Handler = Callable[[Request], Awaitable[Response]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


def asgi_app(
    *,
    check: Check,
    handler: Handler,
    max_body_bytes: int,
    body_timeout: float,
    logger: logging.Logger,
) -> App:
    """An ASGI 3 application: ``check`` the head, read the body, ``handler`` the request."""

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(
            method=scope["method"],
            path=scope["path"],
            headers=_headers(scope["headers"]),
            query=scope["query_string"].decode("latin-1"),
        )
        early = check(request)
        if early is not None:
            if _has_body(request):  # unread: answer, then close rather than keep reading it
                await _linger(receive, request)
                early = Response(early.status, early.body, (*early.headers, *_CLOSE))
            await _send(send, early, request)
            return
        if _declared_length(request) > max_body_bytes:
            await _linger(receive, request)
            await _send(send, _too_large(max_body_bytes), request)
            return
        try:
            body = await asyncio.wait_for(_read_body(receive, max_body_bytes), body_timeout)
        except TimeoutError:
            message = f"the body did not arrive within {body_timeout:g}s"
            await _send(send, _refusal(408, "request-timeout", message), request)
            return
        except _TooLarge:
            await _linger(receive, request)
            await _send(send, _too_large(max_body_bytes), request)
            return
        except _Disconnected:
            return
        await _send(send, await _answer(handler, _with_body(request, body), logger), request)

    return app


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _linger(receive: Receive, request: Request) -> None:
    """Read and discard what the client still sends, within bounds, before a refusal."""
    if "100-continue" in request.headers.get("expect", "").lower():
        return  # it waits for our word before sending: there is nothing to discard

    async def discard() -> None:
        discarded = 0
        while discarded < _LINGER_BYTES:
            message = await receive()
            discarded += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(discard(), _LINGER_SECONDS)


async def _answer(handler: Handler, request: Request, logger: logging.Logger) -> Response:
    try:
        return await handler(request)
    except Exception:
        logger.exception("%s %s failed", request.method, request.path)
        return Response.json(500, {"error": "internal", "message": "internal server error"})


async def _send(send: Send, response: Response, request: Request) -> None:
    headers = [
        (b"content-type", response.content_type.encode("latin-1")),
        (b"content-length", str(len(response.body)).encode("latin-1")),
        *((k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers),
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    body = b"" if request.method == "HEAD" else response.body
    await send({"type": "http.response.body", "body": body})


def _declared_length(request: Request) -> int:
    try:
        return int(request.headers.get("content-length", "0"))
    except ValueError:
        return 0  # h11 refuses a malformed Content-Length before we see it


def _has_body(request: Request) -> bool:
    return "transfer-encoding" in request.headers or _declared_length(request) > 0


def _too_large(limit: int) -> Response:
    return _refusal(413, "too-large", f"the body is larger than {limit} bytes")


def _refusal(status: int, code: str, message: str) -> Response:
    """An answer sent without reading the rest of the body: the connection cannot be reused."""
    return Response.json(status, {"error": code, "message": message}, headers=_CLOSE)


def _with_body(request: Request, body: bytes) -> Request:
    return Request(request.method, request.path, request.headers, body, request.query)


def _headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out
