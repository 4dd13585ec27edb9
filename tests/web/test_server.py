"""The web view's server as a client meets it: read-only, clear errors, no way out of /static.

A real uvicorn server on a free port serves a fake target (one application
whose classes are not importable, as in the in-cluster operator), so these
tests need no Kafka and no replicas.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from streamflow.blueprint.model import Application
from streamflow.operator import targets
from streamflow.operator.web import listen as serving
from streamflow.operator.web import server

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


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
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
        args=(FakeTarget(),),
        kwargs={"port": 0, "interval": 0.2, "on_ready": announce, "running": running},
        daemon=True,
    )
    thread.start()
    assert ready.wait(30), "the server did not start"
    host, port = found["url"].removeprefix("http://").split(":")
    yield host, int(port)
    running.stop()
    thread.join(10)


def request(
    base: tuple[str, int], method: str, path: str, *, host: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request sent as written: no client normalises ``..`` in the path."""
    connection = http.client.HTTPConnection(*base, timeout=20)
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


def test_a_taken_port_is_a_clear_error(base: tuple[str, int]) -> None:
    with pytest.raises(serving.UiError, match=f"port {base[1]} .* already in use"):
        serving.bind("127.0.0.1", base[1])


def test_the_page_is_served_at_the_root_and_per_app(base: tuple[str, int]) -> None:
    for path in ("/", "/apps/demo"):
        status, _, body = request(base, "GET", path)
        assert status == 200 and b'<script type="module"' in body, path
    status, _, _ = request(base, "HEAD", "/api/apps")
    assert status == 200
