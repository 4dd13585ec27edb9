"""The web view's HTTP server: the static page, a JSON API, and a stream of snapshots.

Everything here is read-only by construction: every route is GET (HEAD comes
with it, as HTTP wants), so any other method is answered 405 by the router
before any code of ours runs, and nothing the server can reach changes an
application. It binds to 127.0.0.1 unless told otherwise; while it listens
on a loopback address, it also refuses requests whose Host is not a loopback
name (or that address), so a web page elsewhere cannot read it through DNS
rebinding. Live updates are server-sent events: one ``snapshot`` event per new
snapshot, plain HTTP that proxies and ``kubectl port-forward`` pass through,
with the browser reconnecting by itself. A stream waits on the event loop, not
in a thread (the pool's threads stay free for the API), and only so many are
open at once. Dead letters are read on a click: one read per topic at a time,
which every click meanwhile shares, and a Kafka that cannot be read is a JSON
502 that says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
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
from streamflow.operator.web import access, live, topics
from streamflow.runtime import peek

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_STREAMS",
    "STATIC_DIR",
    "allowed_hosts",
    "create_app",
    "is_loopback",
    "static_ready",
]

STATIC_DIR = Path(__file__).parent / "static"
# as a Host header names them: Starlette keeps the brackets of an IPv6 address
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
MAX_STREAMS = 100  # open event streams; each costs a little memory and a wake-up per snapshot
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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(bound: str) -> list[str] | None:
    """The Hosts a server listening on ``bound`` answers; None (any) unless it is loopback.

    The loopback names, and ``bound`` itself as a browser writes it in a URL:
    ``--host 127.0.0.2`` is reached as ``127.0.0.2``, ``--host ::1`` as ``[::1]``.
    """
    if not is_loopback(bound):
        return None
    found = list(LOOPBACK_HOSTS)
    with contextlib.suppress(ValueError):
        address = ipaddress.ip_address(bound.strip("[]"))
        written = {bound.strip("[]").lower(), address.compressed, address.exploded}
        found += [f"[{a}]" if address.version == 6 else a for a in sorted(written)]
    return list(dict.fromkeys(found))


def create_app(
    target: targets.Target,
    *,
    static: Path = STATIC_DIR,
    interval: float = 1.0,
    host: str = "127.0.0.1",
    closing: threading.Event | None = None,
    max_streams: int = MAX_STREAMS,
    token: str | None = None,
    hosts: Sequence[str] | None = None,
    import_code: bool = True,
) -> Starlette:
    """The ASGI app serving ``target``'s applications.

    ``host``: the address it listens on (a loopback one: other Hosts are refused);
    ``closing``: once set, event streams end; ``max_streams``: open event streams at most;
    ``token``: what every request must carry (:mod:`.access`); ``hosts``: the Host names
    answered, when it listens beyond loopback (None: any); ``import_code=False``: the
    streamlets' classes are never imported (the operator's process).
    """
    hub = live.Hub(target, interval=interval, import_code=import_code)
    api = _Api(target, hub, closing or threading.Event(), max_streams)
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
    answered = allowed_hosts(host) or (list(hosts) if hosts else None)
    if answered is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=answered))
    if token is not None:
        middleware.append(Middleware(access.TokenGate, token=token))
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
    def __init__(
        self, target: targets.Target, hub: live.Hub, closing: threading.Event, max_streams: int
    ) -> None:
        self.target = target
        self.hub = hub
        self.closing = closing
        self.max_streams = max_streams
        self._streams = 0  # only touched on the event loop, so no lock
        self._dead_letters: dict[tuple[str, str, int], tuple[float, Any]] = {}
        self._dead_reads: dict[tuple[str, str, int], asyncio.Future[Any]] = {}

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
        _, data = await watcher.wait(timeout=10.0)
        if data is None:
            return _error(504, "the application did not answer in time; try again")
        return JSONResponse(data, headers={"cache-control": "no-store"})

    async def events(self, request: Request) -> Response:
        if self._streams >= self.max_streams:
            return _error(
                503,
                f"too many live views are open ({self.max_streams}); close some and reload",
            )
        watcher = await self._watcher(request.path_params["app"])
        if isinstance(watcher, Response):
            return watcher

        async def stream() -> AsyncIterator[str]:
            self._streams += 1
            try:
                seq, sent = 0, time.monotonic()
                yield "retry: 2000\n\n"
                # short waits, so a server shutting down ends its streams rather than cutting them
                while not self.closing.is_set() and not await request.is_disconnected():
                    if not watcher.alive:
                        break  # idle-stopped or app gone: the browser reconnects to a new one
                    after = seq
                    seq, data = await watcher.wait(after=after, timeout=0.5)
                    if seq > after and data is not None:
                        yield f"event: snapshot\nid: {seq}\ndata: {json.dumps(data)}\n\n"
                        sent = time.monotonic()
                    elif time.monotonic() - sent > _HEARTBEAT_S:
                        yield ": keep-alive\n\n"  # through proxies that drop quiet connections
                        sent = time.monotonic()
            finally:
                self._streams -= 1

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
        cannot = f"cannot read the dead letters of {streamlet}"
        try:  # the target's own settings: in a cluster, the Secret its admission allows
            config = await run_in_threadpool(self.target.kafka_client_config, name)
        except targets.TargetError as exc:
            return _error(502, f"{cannot}: {exc.message}", hint=exc.hint)
        _, data = await watcher.wait(timeout=10.0)
        bootstrap = (
            config.get("bootstrap.servers") or app.kafka.bootstrap or (data or {}).get("kafka")
        )
        if not bootstrap:
            return _error(502, f"where Kafka is for {name!r} is not known yet; try again")
        topic = app.dlq_topic(streamlet)
        try:
            found = await self._read_dead_letters((name, topic, n), str(bootstrap), config)
        except (KafkaException, peek.PeekError) as exc:
            return _error(502, f"{cannot}: {_kafka_reason(exc)}")
        return JSONResponse({"streamlet": streamlet, "topic": topic, "dead_letters": found})

    async def _read_dead_letters(
        self, key: tuple[str, str, int], bootstrap: str, config: dict[str, Any]
    ) -> Any:
        """One read per key at a time, shared by every request meanwhile, then kept briefly."""
        cached = self._dead_letters.get(key)
        if cached is not None and time.monotonic() - cached[0] < _DEAD_LETTERS_CACHE_S:
            return cached[1]
        pending = self._dead_reads.get(key)
        if pending is None:
            _, topic, n = key

            def read() -> Any:
                return topics.dead_letters(bootstrap=bootstrap, config=config, topic=topic, n=n)

            pending = asyncio.ensure_future(run_in_threadpool(read))
            self._dead_reads[key] = pending
            pending.add_done_callback(lambda done: self._dead_letters_read(key, done))
        # shielded: a client that goes away does not cancel the others' read
        return await asyncio.shield(pending)

    def _dead_letters_read(self, key: tuple[str, str, int], done: asyncio.Future[Any]) -> None:
        self._dead_reads.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return  # not kept: the next click reads again
        now = time.monotonic()
        for old in [k for k, (at, _) in self._dead_letters.items() if now - at >= 60]:
            del self._dead_letters[old]
        self._dead_letters[key] = (now, done.result())

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


def _kafka_reason(exc: Exception) -> str:
    """librdkafka's own sentence rather than the KafkaError's repr."""
    error = exc.args[0] if exc.args else exc
    describe = getattr(error, "str", None)
    return str(describe()) if callable(describe) else str(error)


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
