"""The HTTP ingress: JSON records in over HTTP, answered only once Kafka has them.

A client that gets ``202 Accepted`` may forget its records: the answer is sent
after Kafka acknowledged every one of them (``Emitter.emit``), never when they
are merely queued. Anything else is an error the client can act on:

* ``400`` lists the reasons the body is invalid (malformed JSON, or per field
  and, for an array, per index; the first 100); a batch is all-or-nothing, so
  a bad item means nothing of it is emitted;
* ``401`` without the bearer token (when ``token_env`` names one), ``413`` for
  a body over ``max_body_bytes`` or a batch over ``max_records``, ``415`` for
  a body that is not ``application/json``, ``408`` for a head or body slower
  than its deadline, ``404``/``405`` for other routes;
* ``503`` with ``Retry-After`` when Kafka did not acknowledge in time, or past
  ``max_connections``. Some records of a batch may have been written: retrying
  is safe under the pipeline's at-least-once guarantee, and may repeat them;
* ``429`` with ``Retry-After`` for a connection past
  ``max_connections_per_client`` from one client address.

The port is reachable by whoever can reach the pod, so nothing a request holds
may cost more than a bound: the protocol is uvicorn's (``_httpserver``), the
deadlines and the connection caps are ``runtime.httpguard``'s and ``_httpapp``'s, and
a body becomes records in a worker thread (``_jsonbody``), off the event loop
that answers everyone else. It binds ``127.0.0.1`` unless told otherwise;
``STREAMFLOW_HTTP_HOST`` (which the Kubernetes operator sets to ``0.0.0.0`` in
an ingress's pods, where its Service must reach it) overrides ``host``.

No one client may take every connection. One address (an IPv6 ``/64``) holds
at most ``max_connections_per_client`` (32): a well-behaved client reuses a
few kept-alive connections, each carrying up to ``max_records`` records, and
common client pools keep 10 to 20 alive; 32 leaves room for that, while it
takes 16 addresses to fill the default 512. And a connection must send its
request line within ``request_line_timeout`` (3s, against ``header_timeout``'s
10s for the whole head): the line follows the TCP handshake within a round
trip, so a connection silent for seconds is not a client about to speak, and
its slot is freed then. Behind a proxy or a mesh sidecar every connection has
the proxy's address: there, raise ``max_connections_per_client`` to
``max_connections``.

Routes: ``POST /`` and ``POST /records`` (one JSON object, or an array of
them), ``GET /healthz`` (open, without a token: it says nothing but "ok").
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import math
import os
from collections.abc import Mapping
from typing import Any

from streamflow.api import params
from streamflow.api.ports import Emit, Outlet
from streamflow.api.streamlet import Context, EmitError, Emitter, Streamlet
from streamflow.streamlets.io import _binding, _jsonbody, documents
from streamflow.streamlets.io._httpapp import Request, Response, asgi_app
from streamflow.streamlets.io._httpserver import HttpServer

__all__ = ["BIND_ENV", "HttpIngress"]

BIND_ENV = "STREAMFLOW_HTTP_HOST"
_RECORD_PATHS = frozenset({"/", "/records"})
_HEALTH_PATH = "/healthz"
_INLINE_BODY_BYTES = 8192  # decoded on the event loop: well under a millisecond


class HttpIngress(_binding.SchemaBound, Streamlet):
    """Accepts JSON records over HTTP (``POST /records``) and writes them to the outlet.

    Generic: bind the schema with ``out = Outlet("out", "my.Schema")`` in a subclass,
    or ``HttpIngress.for_schema("my.Schema")``.
    """

    out = Outlet("out", description="the records posted")

    host = params.Str(
        default="127.0.0.1",
        description=f"the address to listen on ({BIND_ENV}, when set, overrides it)",
    )
    port = params.Int(default=8000, min=0, max=65535, description="the port; 0: any free port")
    max_body_bytes = params.Int(
        default=1024 * 1024, min=1, description="the largest body accepted (413 above)"
    )
    max_records = params.Int(
        default=10_000, min=1, description="the most records in one request (413 above)"
    )
    token_env = params.Str(
        default="",
        description="the environment variable holding the bearer token; empty: no token",
    )
    max_connections = params.Int(
        default=512, min=1, description="the most open connections (503 past it)"
    )
    max_connections_per_client = params.Int(
        default=32,
        min=1,
        description="the most open connections from one client address, an IPv6 /64 being one "
        "(429 past it); behind a proxy, raise it to max_connections",
    )
    header_timeout = params.Duration(
        default="10s", min="1ms", description="the time a request head may take in all (408)"
    )
    request_line_timeout = params.Duration(
        default="3s",
        min="1ms",
        description="the time a request's first line may take, from the connection's opening "
        "or the request's first byte (408)",
    )
    body_timeout = params.Duration(
        default="15s", min="1ms", description="the time a request body may take in all (408)"
    )
    idle_timeout = params.Duration(
        default="5s", min="1s", description="how long an idle kept-alive connection stays open"
    )
    key_field = params.Str(default="", description="key each record by this field; empty: unkeyed")
    emit_timeout = params.Duration(
        default="10s", min="1ms", description="how long to wait for Kafka to acknowledge (else 503)"
    )
    retry_after = params.Duration(
        default="5s", min="1s", description="the Retry-After of a 503 answer"
    )

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.bound_port: int | None = None
        self.listening = asyncio.Event()
        self._token: str | None = None

    def setup(self, context: Context) -> None:
        self.context = context
        self.converter = documents.RecordConverter(
            self.bound_schema(context), outlet=self.out.name, key_field=self.key_field
        )

    async def serve(self, emitter: Emitter) -> None:
        """Serve until cancelled; then stop accepting and let requests in flight finish."""
        host = os.environ.get(BIND_ENV) or self.host
        self._token = self._read_token()
        if self._token is None and not _is_loopback(host):
            self.context.logger.warning(
                "the ingress on %s takes records from anyone who can reach it: no bearer "
                "token is set (set token_env, and the variable it names)",
                host,
            )
        app = asgi_app(
            check=self.check,
            handler=lambda request: self.handle(request, emitter=emitter),
            max_body_bytes=self.max_body_bytes,
            body_timeout=self.body_timeout.total_seconds(),
            logger=self.context.logger,
        )
        server = HttpServer(
            app,
            host=host,
            port=self.port,
            logger=self.context.logger,
            max_connections=self.max_connections,
            max_connections_per_client=self.max_connections_per_client,
            header_timeout=self.header_timeout.total_seconds(),
            request_line_timeout=self.request_line_timeout.total_seconds(),
            idle_timeout=self.idle_timeout.total_seconds(),
        )
        port: int | None = None
        try:
            # Inside the try: a start failed or cancelled (SIGTERM) still closes what it opened.
            port = await server.start()
            self.bound_port = port
            self.context.logger.info("listening on http://%s:%d", host, port, extra={"port": port})
            self.listening.set()
            await asyncio.Event().wait()
        finally:
            self.listening.clear()
            await server.close()
            if port is not None:
                self.context.logger.info("stopped listening on port %d", port)

    def _read_token(self) -> str | None:
        """The bearer token, or None when none is asked for; a named but unset one fails closed."""
        if not self.token_env:
            return None
        token = os.environ.get(self.token_env, "")
        if not token:
            raise RuntimeError(
                f"token_env names {self.token_env!r}, but that environment variable is unset "
                "or empty: set it (on Kubernetes, from a Secret), or unset token_env"
            )
        return token

    def check(self, request: Request) -> Response | None:
        """The answer a request gets from its head alone, before its body is read; or None."""
        if request.path == _HEALTH_PATH:
            if request.method in ("GET", "HEAD"):
                return Response.json(200, {"status": "ok"})
            return _not_allowed(request, "GET, HEAD")
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        if request.path not in _RECORD_PATHS:
            return _error(404, "not-found", f"no route {request.path}: POST records to /records")
        if request.method != "POST":
            return _not_allowed(request, "POST")
        content_type = request.headers.get("content-type")
        if content_type is None or not _is_json(content_type):
            sent = f"not {content_type}" if content_type else "with a Content-Type header"
            return _error(415, "unsupported-media-type", f"send application/json, {sent}")
        return None

    def _unauthorized(self, request: Request) -> Response | None:
        token = self._token
        if token is None:
            return None
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        # compare_digest: the time taken says nothing about how much of the token matched.
        if scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), token.encode()
        ):
            return None
        challenge = 'Bearer realm="streamflow"'
        if presented:
            challenge += ', error="invalid_token"'
        message = "send the ingress's token as Authorization: Bearer <token>"
        return _error(401, "unauthorized", message, headers=(("www-authenticate", challenge),))

    async def handle(self, request: Request, *, emitter: Emitter) -> Response:
        """The answer to one request that passed :meth:`check`, body read."""
        early = self.check(request)
        if early is not None:
            return early
        try:
            values = await self._decode(request.body)
        except _jsonbody.Refusal as refusal:
            return Response.json(refusal.status, refusal.to_json())
        try:
            await self._emit_all([self.converter.output(v) for v in values], emitter)
        except EmitError as exc:
            self.context.logger.warning("answering 503: Kafka did not acknowledge: %s", exc)
            return _error(
                503,
                "unavailable",
                f"the records could not be written to Kafka: {exc}; retry later",
                headers=(("retry-after", str(math.ceil(self.retry_after.total_seconds()))),),
            )
        return Response.json(202, {"accepted": len(values)})

    async def _decode(self, body: bytes) -> list[dict[str, Any]]:
        """The records in ``body``; a large body is decoded in a worker thread.

        A small body costs less to decode than the hop to a thread and back, and
        its cost is bounded by its size (at most 100 problems are collected).
        """
        if len(body) <= _INLINE_BODY_BYTES:
            return _jsonbody.decode(body, self.converter, max_records=self.max_records)
        return await asyncio.to_thread(
            _jsonbody.decode, body, self.converter, max_records=self.max_records
        )

    async def _emit_all(self, outputs: list[Emit], emitter: Emitter) -> None:
        """Emit concurrently (so Kafka batches them); raise the first failure after all ended."""
        timeout = self.emit_timeout.total_seconds()
        results = await asyncio.gather(
            *(emitter.emit(output, timeout=timeout) for output in outputs), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        emit_errors = [f for f in failures if isinstance(f, EmitError)]
        if emit_errors:
            raise emit_errors[0]
        if failures:
            raise failures[0]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _error(
    status: int,
    code: str,
    message: str,
    *,
    problems: list[dict[str, Any]] | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Response:
    doc: dict[str, Any] = {"error": code, "message": message}
    if problems is not None:
        doc["problems"] = problems
    return Response.json(status, doc, headers=headers)


def _not_allowed(request: Request, allowed: str) -> Response:
    message = f"{request.method} is not allowed on {request.path}: use {allowed}"
    return _error(405, "method-not-allowed", message, headers=(("allow", allowed),))
