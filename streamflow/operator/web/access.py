"""Who may read the web view when it listens beyond loopback: the holders of a token.

The view shows every application's snapshot, its dead-letter keys and their
error headers, which the operator reads with each application's Kafka
credentials; on a cluster's network, any pod could read them. So a web view
that listens on anything but a loopback address needs a token (the operator
refuses to start one without), and every request must carry it:

* ``Authorization: Bearer <token>`` (scripts, ``curl``), or
* the cookie a browser gets by opening ``/?token=<token>`` once: the answer is
  a redirect to the same page without the token in its address, with the cookie
  (``HttpOnly``, ``SameSite=Strict``) holding a digest of the token, never the
  token itself. A browser's ``EventSource`` cannot send a header; it sends that
  cookie.

Tokens are compared in constant time. A request without a valid one is a 401
that says how to give it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["COOKIE", "TokenGate"]

COOKIE = "streamflow-ui"
_NEEDS = (
    "the web view needs its token: open /?token=TOKEN in the browser once, "
    "or send Authorization: Bearer TOKEN"
)


class TokenGate:
    """ASGI middleware: every HTTP request carries the token, or is answered 401."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        if not token:
            raise ValueError("an empty token would admit anyone")
        self.app = app
        self._token = token.encode()
        self._cookie = _digest(token).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        query = dict(parse_qsl((scope.get("query_string") or b"").decode("latin-1")))
        offered = query.get("token")
        if offered is not None and hmac.compare_digest(offered.encode(), self._token):
            await _set_cookie_and_redirect(scope, query, self._cookie, send)
            return
        if self._bearer(headers.get(b"authorization", b"")) or self._has_cookie(
            headers.get(b"cookie", b"")
        ):
            await self.app(scope, receive, send)
            return
        await _unauthorized(send)

    def _bearer(self, value: bytes) -> bool:
        scheme, _, token = value.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._token)

    def _has_cookie(self, value: bytes) -> bool:
        for part in value.split(b";"):
            name, _, found = part.strip().partition(b"=")
            if name == COOKIE.encode() and hmac.compare_digest(found, self._cookie):
                return True
        return False


def _digest(token: str) -> str:
    """What the cookie holds: the token cannot be read back from it."""
    return hashlib.sha256(b"streamflow-ui-cookie:" + token.encode()).hexdigest()


async def _set_cookie_and_redirect(
    scope: Scope, query: dict[str, str], cookie: bytes, send: Send
) -> None:
    rest = {k: v for k, v in query.items() if k != "token"}
    location = (scope.get("root_path") or "") + scope["path"]
    if rest:
        location += "?" + urlencode(rest)
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location.encode("latin-1")),
                (
                    b"set-cookie",
                    COOKIE.encode() + b"=" + cookie + b"; Path=/; HttpOnly; SameSite=Strict",
                ),
                (b"cache-control", b"no-store"),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


async def _unauthorized(send: Send) -> None:
    body = json.dumps({"error": _NEEDS}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="streamflow ui"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
