"""The web view's server as a client meets it: read-only, clear errors, no way out of /static.

A real uvicorn server on a free port serves a fake target (one application
whose classes are not importable, as in the in-cluster operator), so these
tests need no Kafka and no replicas.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence

import anyio.to_thread
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from streamflow.blueprint.model import Application
from streamflow.operator import targets
from streamflow.operator.web import listen as serving
from streamflow.operator.web import server
from tests.waiting import wait_until

APP = Application.from_dict(
    {
        "name": "demo",
        "streamlets": {
            "source": {"class": "not_importable_here:Source"},
            "sink": {"class": "not_importable_here:Sink", "replicas": 2},
        },
        "topics": {"numbers": {"producers": ["source.out"], "consumers": ["sink.in"]}},
    }
)
ROUTES = [
    "/",
    "/apps/demo",
    "/api/apps",
    "/api/apps/demo",
    "/api/apps/demo/events",
    "/api/apps/demo/dead-letters/sink",
    "/static/index.html",
]


class FakeTarget:
    kind = "local"

    def application(self, name: str) -> Application:
        if name != APP.name:
            raise targets.TargetError(
                f"no application {name!r} is deployed on the local target", hint="deployed: demo"
            )
        return APP

    def status(self, name: str) -> targets.AppStatus:
        self.application(name)
        streamlets = tuple(
            targets.StreamletStatus(s, desired=spec.replicas, ready=0, running=0)
            for s, spec in APP.streamlets.items()
        )
        return targets.AppStatus(name, "local", "Pending", "starting", False, streamlets)

    def list(self) -> Sequence[targets.AppStatus]:
        return [self.status(APP.name)]

    def kafka_client_config(self, name: str) -> dict[str, str]:
        self.application(name)
        return {"bootstrap.servers": self.bootstrap}

    bootstrap = ""


@contextlib.contextmanager
def served(
    target: object, host: str = "127.0.0.1", access: serving.Access | None = None
) -> Iterator[tuple[str, int]]:
    """``serve`` on a free port of ``host``, as ``streamflow ui --host`` does."""
    if not server.static_ready():
        pytest.fail("the web view is not built: run ./dev setup", pytrace=False)
    ready = threading.Event()
    found: dict[str, str] = {}
    running = serving.Running()

    def announce(url: str) -> None:
        found["url"] = url
        ready.set()

    thread = threading.Thread(
        target=serving.serve,
        args=(target,),
        kwargs={
            "host": host,
            "port": 0,
            "interval": 0.2,
            "on_ready": announce,
            "running": running,
            "access": access,
        },
        daemon=True,
    )
    thread.start()
    assert ready.wait(30), "the server did not start"
    address, port = found["url"].removeprefix("http://").rsplit(":", 1)
    try:
        yield address.strip("[]"), int(port)
    finally:
        running.stop()
        thread.join(10)


@contextlib.contextmanager
def serving_app(app: Starlette, closing: threading.Event) -> Iterator[tuple[str, int]]:
    """uvicorn serving an app made here, on a free port of 127.0.0.1."""
    sock = serving.bind("127.0.0.1", 0)
    instance = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: instance.started, what="uvicorn to start", timeout=30, interval=0.05)
    try:
        yield "127.0.0.1", sock.getsockname()[1]
    finally:
        closing.set()
        instance.should_exit = True
        thread.join(15)
        sock.close()


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[str, int]]:
    with served(FakeTarget()) as found:
        yield found


def request(
    base: tuple[str, int],
    method: str,
    path: str,
    *,
    host: str | None = None,
    timeout: float = 20,
) -> tuple[int, dict[str, str], bytes]:
    """One request sent as written: no client normalises ``..`` in the path."""
    connection = http.client.HTTPConnection(*base, timeout=timeout)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", host or f"127.0.0.1:{base[1]}")
        connection.endheaders()
        response = connection.getresponse()
        body = b"" if path.endswith("/events") and response.status == 200 else response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"])
def test_every_route_refuses_every_method_but_get(base: tuple[str, int], method: str) -> None:
    for path in ROUTES:
        status, headers, body = request(base, method, path)
        assert status == 405, f"{method} {path}: {status} {body!r}"
        if not path.startswith("/static"):
            assert "read-only" in json.loads(body)["error"]
            assert headers["allow"] == "GET, HEAD"


def test_an_unknown_app_is_a_404_that_lists_the_known_ones(base: tuple[str, int]) -> None:
    for path in ("/api/apps/nope", "/api/apps/nope/events", "/api/apps/nope/dead-letters/x"):
        status, headers, body = request(base, "GET", path)
        assert status == 404, path
        assert headers["content-type"] == "application/json"
        error = json.loads(body)
        assert error["error"] == "no application 'nope' is deployed on the local target"
        assert error["apps"] == ["demo"]
    status, _, body = request(base, "GET", "/api/apps/demo/dead-letters/nope")
    assert status == 404 and json.loads(body)["streamlets"] == ["source", "sink"]
    status, _, body = request(base, "GET", "/api/apps/demo/dead-letters/sink?n=100000")
    assert status == 400 and "from 1 to 100" in json.loads(body)["error"]


@pytest.mark.parametrize(
    "path",
    [
        "/static/../../../../etc/passwd",
        "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/static/%2e%2e%2f%2e%2e%2fserver.py",
        "/static/..%5c..%5cserver.py",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
    ],
)
def test_the_static_route_does_not_escape_its_folder(base: tuple[str, int], path: str) -> None:
    status, _, body = request(base, "GET", path)
    assert status in (400, 404), f"{path}: {status}"
    assert b"root:" not in body and b"def create_app" not in body


def test_a_snapshot_without_the_apps_code_still_has_the_graph(base: tuple[str, int]) -> None:
    status, headers, body = request(base, "GET", "/api/apps/demo")
    assert status == 200, body
    snap = json.loads(body)
    assert [s["name"] for s in snap["streamlets"]] == ["source", "sink"]
    assert [(e["streamlet"], e["topic"], e["direction"]) for e in snap["edges"]] == [
        ("source", "numbers", "produce"),
        ("sink", "numbers", "consume"),
    ]
    assert snap["phase"] == "Pending"
    assert "default-src 'self'" in headers["content-security-policy"]


def test_the_event_stream_sends_snapshots(base: tuple[str, int]) -> None:
    connection = http.client.HTTPConnection(*base, timeout=20)
    try:
        connection.request("GET", "/api/apps/demo/events")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("content-type", "").startswith("text/event-stream")
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 2 and time.monotonic() < deadline:
            line = response.fp.readline().decode()
            if line.startswith("id: "):
                seen.append(int(line[4:]))
        assert len(seen) == 2 and seen[1] > seen[0]
    finally:
        connection.close()


def test_other_hosts_are_refused_while_bound_to_loopback(base: tuple[str, int]) -> None:
    status, _, _ = request(base, "GET", "/api/apps", host="evil.example:80")
    assert status == 400
    status, _, _ = request(base, "GET", "/api/apps", host=f"localhost:{base[1]}")
    assert status == 200


def test_partial_request_heads_are_closed_by_the_head_deadlines(base: tuple[str, int]) -> None:
    """50 partial heads used to stay open for good; each is answered 408 and closed now."""
    silent = [socket.create_connection(base, timeout=30) for _ in range(25)]
    partial = [socket.create_connection(base, timeout=30) for _ in range(25)]
    for sock in partial:
        sock.sendall(b"GET /api/apps HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    try:
        for sock in silent:  # no line at all: the request line's deadline
            answer = _read_until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert b"no complete request line arrived within 3s" in answer
        for sock in partial:  # a line, then nothing: the whole head's deadline
            answer = _read_until_closed(sock)
            assert b"the request head did not arrive within 10s" in answer, answer
        status, _, _ = request(base, "GET", "/api/apps")  # and the server still answers
        assert status == 200
    finally:
        for sock in silent + partial:
            sock.close()


def _read_until_closed(sock: socket.socket) -> bytes:
    """What the server sent before it closed the connection (a timeout fails the test)."""
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def test_a_taken_port_is_a_clear_error(base: tuple[str, int]) -> None:
    with pytest.raises(serving.UiError, match=f"port {base[1]} .* already in use"):
        serving.bind("127.0.0.1", base[1])


def test_the_page_is_served_at_the_root_and_per_app(base: tuple[str, int]) -> None:
    for path in ("/", "/apps/demo"):
        status, _, body = request(base, "GET", path)
        assert status == 200 and b'<script type="module"' in body, path
    status, _, _ = request(base, "HEAD", "/api/apps")
    assert status == 200


@pytest.mark.parametrize("host", ["::1", "127.0.0.2"])
def test_every_loopback_address_is_served_under_its_own_name(host: str) -> None:
    with served(FakeTarget(), host) as address:
        shown = f"[{host}]" if ":" in host else host
        status, _, body = request(address, "GET", "/api/apps", host=f"{shown}:{address[1]}")
        assert status == 200, body
        status, _, _ = request(address, "GET", "/api/apps", host=f"[::1]:{address[1]}")
        assert status == 200
        status, _, _ = request(address, "GET", "/api/apps", host="evil.example")
        assert status == 400


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_dead_letters_while_kafka_is_down_are_a_502_that_says_so() -> None:
    target = FakeTarget()
    target.bootstrap = f"127.0.0.1:{closed_port()}"
    with served(target) as address:
        status, headers, body = request(address, "GET", "/api/apps/demo/dead-letters/sink")
    assert status == 502, body
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error.startswith("cannot read the dead letters of sink: "), error


class KafkaRefused(FakeTarget):
    def kafka_client_config(self, name: str) -> dict[str, str]:
        raise targets.TargetError(
            "the application's Kafka settings are refused: security.protocol",
            hint="set them in the Secret named by spec.kafka.secret",
        )


def test_refused_kafka_settings_are_a_502_naming_the_reason() -> None:
    with served(KafkaRefused()) as address:
        status, _, body = request(address, "GET", "/api/apps/demo/dead-letters/sink")
    assert status == 502, body
    answer = json.loads(body)
    assert "refused: security.protocol" in answer["error"]
    assert answer["hint"] == "set them in the Secret named by spec.kafka.secret"


async def _threads_in_use(request: Request) -> Response:
    limiter = anyio.to_thread.current_default_thread_limiter()
    return JSONResponse({"borrowed": limiter.borrowed_tokens})


def open_stream(address: tuple[str, int]) -> http.client.HTTPConnection:
    """An event stream whose first snapshot has arrived."""
    connection = http.client.HTTPConnection(*address, timeout=20)
    connection.request("GET", "/api/apps/demo/events")
    response = connection.getresponse()
    assert response.status == 200
    while not response.fp.readline().startswith(b"id: "):
        pass
    return connection


def test_sixty_open_event_streams_hold_no_threads_and_the_api_answers() -> None:
    closing = threading.Event()
    # a snapshot a minute: the streams wait, which is when they used to hold a thread each
    app = server.create_app(FakeTarget(), interval=60.0, closing=closing)
    app.router.routes.append(Route("/test/threads", _threads_in_use))
    with serving_app(app, closing) as address:
        streams = [open_stream(address) for _ in range(60)]
        try:
            time.sleep(1.0)  # every stream is waiting for its next snapshot now
            status, _, body = request(address, "GET", "/test/threads", timeout=5)
            assert status == 200 and json.loads(body)["borrowed"] <= 2, body
            for path in ("/api/apps", "/api/apps/demo"):
                started = time.monotonic()
                status, _, _ = request(address, "GET", path, timeout=5)
                assert status == 200 and time.monotonic() - started < 2.0, path
        finally:
            for stream in streams:
                stream.close()


def test_streams_beyond_the_cap_are_a_clear_503() -> None:
    closing = threading.Event()
    app = server.create_app(FakeTarget(), interval=60.0, closing=closing, max_streams=3)
    with serving_app(app, closing) as address:
        streams = [open_stream(address) for _ in range(3)]
        try:
            status, _, body = request(address, "GET", "/api/apps/demo/events", timeout=5)
            assert status == 503, body
            assert "too many live views are open (3)" in json.loads(body)["error"]
            streams.pop().close()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # a closed stream frees its place
                with contextlib.closing(http.client.HTTPConnection(*address, timeout=5)) as again:
                    again.request("GET", "/api/apps/demo/events")
                    if again.getresponse().status == 200:
                        break
                time.sleep(0.2)
            else:
                pytest.fail("the closed stream's place was not freed")
        finally:
            for stream in streams:
                stream.close()
