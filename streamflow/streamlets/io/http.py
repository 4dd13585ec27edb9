"""The HTTP ingress: JSON records in over HTTP, answered only once Kafka has them.

A client that gets ``202 Accepted`` may forget its records: the answer is sent
after Kafka acknowledged every one of them (``Emitter.emit``), never when they
are merely queued. Anything else is an error the client can act on:

* ``400`` lists every reason the body is invalid (malformed JSON, or per field
  and, for an array, per index); a batch is all-or-nothing, so a bad item
  means nothing of it is emitted;
* ``413`` for a body over ``max_body_bytes``, ``415`` for a body that is not
  JSON, ``404``/``405`` for other routes;
* ``503`` with ``Retry-After`` when Kafka did not acknowledge in time. Some
  records of a batch may have been written: retrying is safe under the
  pipeline's at-least-once guarantee, and may repeat them.

Routes: ``POST /`` and ``POST /records`` (one JSON object, or an array of
them), ``GET /healthz``. The protocol layer is ``_httpserver`` (asyncio + h11).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any

from streamflow.api import params
from streamflow.api.ports import Emit, Outlet
from streamflow.api.streamlet import Context, EmitError, Emitter, Streamlet
from streamflow.schema.codecs import DecodeError
from streamflow.streamlets.io import _binding, _records
from streamflow.streamlets.io._httpserver import HttpServer, Request, Response

__all__ = ["HttpIngress"]

_RECORD_PATHS = frozenset({"/", "/records"})
_HEALTH_PATH = "/healthz"


class HttpIngress(_binding.SchemaBound, Streamlet):
    """Accepts JSON records over HTTP (``POST /records``) and writes them to the outlet.

    Generic: bind the schema with ``out = Outlet("out", "my.Schema")`` in a subclass,
    or ``HttpIngress.for_schema("my.Schema")``.
    """

    out = Outlet("out", description="the records posted")

    host = params.Str(default="0.0.0.0", description="the address to listen on")
    port = params.Int(default=8000, min=0, max=65535, description="the port; 0: any free port")
    max_body_bytes = params.Int(
        default=1024 * 1024, min=1, description="the largest body accepted (413 above)"
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

    def setup(self, context: Context) -> None:
        self.context = context
        self.converter = _records.RecordConverter(
            self.bound_schema(context), outlet=self.out.name, key_field=self.key_field
        )

    async def serve(self, emitter: Emitter) -> None:
        """Serve until cancelled; then stop accepting and let requests in flight finish."""
        server = HttpServer(
            lambda request: self.handle(request, emitter=emitter),
            host=self.host,
            port=self.port,
            max_body_bytes=self.max_body_bytes,
            logger=self.context.logger,
        )
        self.bound_port = await server.start()
        self.context.logger.info(
            "listening on http://%s:%d", self.host, self.bound_port, extra={"port": self.bound_port}
        )
        self.listening.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.listening.clear()
            await server.close()
            self.context.logger.info("stopped listening on port %d", self.bound_port)

    async def handle(self, request: Request, *, emitter: Emitter) -> Response:
        """The answer to one request."""
        if request.path == _HEALTH_PATH:
            if request.method in ("GET", "HEAD"):
                return Response.json(200, {"status": "ok"})
            return _not_allowed(request, "GET, HEAD")
        if request.path not in _RECORD_PATHS:
            return _error(404, "not-found", f"no route {request.path}: POST records to /records")
        if request.method != "POST":
            return _not_allowed(request, "POST")
        return await self._post(request, emitter)

    async def _post(self, request: Request, emitter: Emitter) -> Response:
        content_type = request.headers.get("content-type")
        if content_type is not None and not _is_json(content_type):
            return _error(
                415, "unsupported-media-type", f"send application/json, not {content_type}"
            )
        try:
            doc = json.loads(request.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            message = f"the body is not valid JSON: {exc}"
            return _error(400, "malformed-json", message, problems=[{"message": message}])
        values, problems = self._convert(doc)
        if problems:
            return _error(
                400,
                "invalid-records",
                f"{len(problems)} problem(s) with the records; nothing was accepted",
                problems=[p.to_json() for p in problems],
            )
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

    def _convert(self, doc: Any) -> tuple[list[dict[str, Any]], list[_records.Problem]]:
        if isinstance(doc, dict):
            items, indexed = [doc], False
        elif isinstance(doc, list):
            items, indexed = doc, True
        else:
            message = "expected a JSON object (one record) or an array of objects (a batch)"
            return [], [_records.Problem(message)]
        values: list[dict[str, Any]] = []
        problems: list[_records.Problem] = []
        for index, item in enumerate(items):
            try:
                values.append(self.converter.convert(item))
            except DecodeError as exc:
                problems += _records.problems_of(exc, index=index if indexed else None)
        return values, problems

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
