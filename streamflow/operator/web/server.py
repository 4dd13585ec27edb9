"""The web view's HTTP server: the static page, a JSON API, and a stream of snapshots.

Everything here is read-only by construction: every route is GET (HEAD comes
with it, as HTTP wants), so any other method is answered 405 by the router
before any code of ours runs, and nothing the server can reach changes an
application. It binds to 127.0.0.1 unless told otherwise; while it does, it
also refuses requests whose Host is not a loopback name, so a web page
elsewhere cannot read it through DNS rebinding. Live updates are server-sent
events: one ``snapshot`` event per new snapshot, plain HTTP that proxies and
``kubectl port-forward`` pass through, with the browser reconnecting by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streamflow.operator import targets
from streamflow.operator.web import live, topics
from streamflow.runtime import clients

__all__ = ["LOOPBACK_HOSTS", "STATIC_DIR", "create_app", "static_ready"]

STATIC_DIR = Path(__file__).parent / "static"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_DEAD_LETTERS_MAX = 100
_DEAD_LETTERS_CACHE_S = 2.0
_HEARTBEAT_S = 15.0
_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        b"frame-ancestors 'none'",
    ),
]


def static_ready(directory: Path = STATIC_DIR) -> bool:
    """Whether the page was built (``npm run build`` in ``web/``, which ``./dev setup`` runs)."""
    return (directory / "index.html").is_file()


def create_app(
    target: targets.Target,
    *,
    static: Path = STATIC_DIR,
    interval: float = 1.0,
    loopback_only: bool = True,
    closing: threading.Event | None = None,
) -> Starlette:
    """The ASGI app serving ``target``'s applications.

    ``loopback_only``: refuse other Hosts; ``closing``: once set, event streams end.
    """
    hub = live.Hub(target, interval=interval)
    api = _Api(target, hub, closing or threading.Event())
    routes = [
        Route("/", _index(static), methods=["GET"]),
        Route("/apps/{app}", _index(static), methods=["GET"]),
        Route("/api/apps", api.apps, methods=["GET"]),
        Route("/api/apps/{app}", api.snapshot, methods=["GET"]),
        Route("/api/apps/{app}/events", api.events, methods=["GET"]),
        Route("/api/apps/{app}/dead-letters/{streamlet}", api.dead_letters, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=static, check_dir=False), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if loopback_only:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK_HOSTS)))
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error},  # type: ignore[dict-item]
        lifespan=_lifespan(hub),
    )


def _lifespan(hub: live.Hub) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        hub.stop()  # the watchers' threads end; their Kafka consumers close

    return lifespan


def _index(static: Path) -> Any:
    async def index(request: Request) -> Response:
        page = static / "index.html"
        if not page.is_file():
            return _error(503, "the web view is not built", hint="run ./dev setup")
        return FileResponse(page, headers={"cache-control": "no-cache"})

    return index


class _Api:
    def __init__(self, target: targets.Target, hub: live.Hub, closing: threading.Event) -> None:
        self.target = target
        self.hub = hub
        self.closing = closing
        self._dead_letters: dict[tuple[str, str, int], tuple[float, Any]] = {}
        self._dead_lock = threading.Lock()

    async def apps(self, request: Request) -> Response:
        try:
            found = await run_in_threadpool(self.target.list)
        except targets.TargetError as exc:
            return _error(502, exc.message, hint=exc.hint)
        return JSONResponse(
            {
                "target": self.target.kind,
                "apps": [
                    {
                        "name": a.name,
                        "phase": a.phase,
                        "message": a.message,
                        "streamlets": len(a.streamlets),
                        "ready": sum(s.ready for s in a.streamlets),
                        "desired": sum(s.desired for s in a.streamlets),
                    }
                    for a in found
                ],
            }
        )

    async def snapshot(self, request: Request) -> Response:
        watcher = await self._watcher(request.path_params["app"])
        if isinstance(watcher, Response):
            return watcher
        _, data = await run_in_threadpool(lambda: watcher.latest(timeout=10.0))
        if data is None:
            return _error(504, "the application did not answer in time; try again")
        return JSONResponse(data, headers={"cache-control": "no-store"})

    async def events(self, request: Request) -> Response:
        watcher = await self._watcher(request.path_params["app"])
        if isinstance(watcher, Response):
            return watcher

        async def stream() -> AsyncIterator[str]:
            seq, sent = 0, time.monotonic()
            yield "retry: 2000\n\n"
            # short waits, so a server shutting down ends its streams rather than cutting them
            while not self.closing.is_set() and not await request.is_disconnected():
                if not watcher.alive:
                    break  # idle-stopped or app gone: the browser reconnects to a new one
                after = seq
                seq, data = await run_in_threadpool(_next, watcher, after)
                if seq > after and data is not None:
                    yield f"event: snapshot\nid: {seq}\ndata: {json.dumps(data)}\n\n"
                    sent = time.monotonic()
                elif time.monotonic() - sent > _HEARTBEAT_S:
                    yield ": keep-alive\n\n"  # through proxies that drop quiet connections
                    sent = time.monotonic()

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def dead_letters(self, request: Request) -> Response:
        name, streamlet = request.path_params["app"], request.path_params["streamlet"]
        try:
            n = int(request.query_params.get("n", "20"))
        except ValueError:
            n = 0
        if not 1 <= n <= _DEAD_LETTERS_MAX:
            return _error(400, f"n must be a whole number from 1 to {_DEAD_LETTERS_MAX}")
        watcher = await self._watcher(name)
        if isinstance(watcher, Response):
            return watcher
        app = watcher.app
        if streamlet not in app.streamlets:
            return _error(
                404,
                f"application {name!r} has no streamlet {streamlet!r}",
                streamlets=list(app.streamlets),
            )
        _, data = await run_in_threadpool(lambda: watcher.latest(timeout=10.0))
        bootstrap = app.kafka.bootstrap or (data or {}).get("kafka")
        if not bootstrap:
            return _error(502, f"where Kafka is for {name!r} is not known yet; try again")
        topic = app.dlq_topic(streamlet)
        found = await run_in_threadpool(
            lambda: self._read_dead_letters(
                str(bootstrap), clients.application_config(app, os.environ), topic, n, name
            )
        )
        return JSONResponse({"streamlet": streamlet, "topic": topic, "dead_letters": found})

    def _read_dead_letters(self, bootstrap: str, config: Any, topic: str, n: int, app: str) -> Any:
        key = (app, topic, n)
        with self._dead_lock:  # one reader at a time, and a click storm reads once
            cached = self._dead_letters.get(key)
            if cached is not None and time.monotonic() - cached[0] < _DEAD_LETTERS_CACHE_S:
                return cached[1]
            found = topics.dead_letters(bootstrap=bootstrap, config=config, topic=topic, n=n)
            self._dead_letters[key] = (time.monotonic(), found)
            return found

    async def _watcher(self, name: str) -> live.Watcher | Response:
        try:
            return await run_in_threadpool(self.hub.watcher, name)
        except targets.TargetError as exc:
            known = await run_in_threadpool(self._names)
            return _error(404, exc.message, hint=exc.hint, apps=known)

    def _names(self) -> list[str]:
        try:
            return [a.name for a in self.target.list()]
        except targets.TargetError:
            return []


def _next(watcher: live.Watcher, after: int) -> tuple[int, dict[str, Any] | None]:
    return watcher.latest(after=after, timeout=0.5)


def _error(status: int, message: str, *, hint: str = "", **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if hint:
        body["hint"] = hint
    return JSONResponse({**body, **extra}, status_code=status)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["allow"] = "GET, HEAD"
        body = {"error": "the web view is read-only: only GET (and HEAD) are allowed"}
        return JSONResponse(body, status_code=405, headers=headers)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=headers)


class _SecurityHeaders:
    """Adds headers that keep the page from being framed or sniffed into something else."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *_SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)
