"""HttpIngress against hostile clients: issue 10, findings 10 to 13, and one client's flood.

Each test is what an attacker does, over a real socket: a body of a third of a
million records, a drip of one byte at a time, a flood of half-open
connections (from many addresses or from one), silent connections, an
unauthenticated or untyped request, a JSON bomb. The server must answer each
one quickly with a clear status, and keep serving everyone else. Deadlines are
checked against generous bounds, never exact times.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from streamflow.api import describe
from streamflow.api.config import config_problems
from streamflow.runtime import httpguard
from streamflow.schema import SchemaStore
from tests.waiting import wait_until

from .test_io_http import GOOD, FakeEmitter, ReadingApi, post, run

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[3]


async def post_json(url: str, content: bytes, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            url, content=content, headers={"content-type": "application/json", **headers}
        )


# -- finding 10: one request must not cost minutes of CPU on the event loop ---------------------


def test_a_third_of_a_million_records_in_one_body_is_refused_at_once(store: SchemaStore) -> None:
    body = b"[" + b",".join([b"{}"] * 349_000) + b"]"
    assert len(body) <= 1024 * 1024  # under the default max_body_bytes

    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post_json(f"{url}/records", body)
        assert response.status_code == 413
        assert response.json()["error"] == "too-many-records"
        assert "10000" in response.json()["message"]

    assert run(store, scenario).acked == []


def test_problems_stop_being_listed_after_a_hundred(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post_json(f"{url}/records", json.dumps([{}] * 1000).encode())
        assert response.status_code == 400
        doc = response.json()
        assert len(doc["problems"]) == 100
        assert doc["truncated"] is True

    run(store, scenario)


def test_records_are_converted_off_the_event_loop(
    store: SchemaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()

    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        original = api.converter.convert

        def slow(doc: Any) -> dict[str, Any]:
            entered.set()
            release.wait(20)
            return original(doc)

        monkeypatch.setattr(api.converter, "convert", slow)

        def health_while_converting() -> int | None:
            # A thread of its own: a client on the server's loop would wait with it.
            try:
                assert entered.wait(10)
                return httpx.get(f"{url}/healthz", timeout=5).status_code
            except httpx.TimeoutException:
                return None
            finally:
                release.set()

        batch = json.dumps([GOOD] * 500).encode()  # a large body: small ones are decoded inline
        big = asyncio.create_task(post_json(f"{url}/records", batch))
        assert await asyncio.to_thread(health_while_converting) == 200
        assert (await big).status_code == 202

    run(store, scenario)


# -- finding 11: slow clients and half-open connections -----------------------------------------


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(True)
    return sock


def _drip_until_closed(sock: socket.socket, data: bytes, *, every: float, limit: float) -> bytes:
    """Send ``data`` a byte at a time until the server answers or closes; what it sent back."""
    started = time.monotonic()
    sock.settimeout(every)
    for byte in data:
        if time.monotonic() - started > limit:
            break
        try:
            sock.sendall(bytes([byte]))
            answer = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return b""
        return answer + _read_rest(sock)
    raise AssertionError(f"the server still held the connection after {limit:g}s of drip")


def _read_rest(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError:
        pass
    return b"".join(chunks)


def test_a_header_drip_is_cut_off_by_the_header_deadline(store: SchemaStore) -> None:
    head = b"POST /records HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 4000

    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        assert api.bound_port
        sock = _connect(api.bound_port)
        with sock:
            answer = await asyncio.to_thread(_drip_until_closed, sock, head, every=0.5, limit=40)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408 ")
        assert answer == b"" or b"request head" in answer

    # The default header_timeout (10 s); the request line's own deadline is out of the way.
    run(store, scenario, request_line_timeout="60s")


def test_a_body_drip_is_answered_408_by_the_body_deadline(store: SchemaStore) -> None:
    body = json.dumps([GOOD] * 50).encode()
    head = (
        b"POST /records HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
    )

    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        assert api.bound_port
        sock = _connect(api.bound_port)
        with sock:
            sock.sendall(head)
            answer = await asyncio.to_thread(_drip_until_closed, sock, body, every=0.5, limit=50)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b"request-timeout" in answer

    assert run(store, scenario).acked == []  # the default body_timeout (15 s)


_FLOOD_CHILD = """
import asyncio, logging, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from streamflow.schema import SchemaStore
from tests.streamlets.io.conftest import SCHEMAS, build
from tests.streamlets.io.test_io_http import FakeEmitter, ReadingApi

api = build(ReadingApi, {"host": "127.0.0.1", "port": 0}, SchemaStore([SCHEMAS]))

async def main():
    task = asyncio.create_task(api.serve(FakeEmitter()))
    await api.listening.wait()
    print(api.bound_port, flush=True)
    await asyncio.to_thread(sys.stdin.read)
    task.cancel()

asyncio.run(main())
"""


def test_a_flood_of_half_open_connections_never_exhausts_the_descriptors(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    with log.open("w") as errors:
        child = subprocess.Popen(
            [sys.executable, "-c", _FLOOD_CHILD],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    assert child.stdout is not None and child.stdin is not None
    try:
        port = int(child.stdout.readline())
        flood: list[socket.socket] = []
        refused = 0
        for i in range(300):
            # From ten addresses, each under its max_connections_per_client: the total cap is it.
            source = (f"127.0.0.{2 + i % 10}", 0)
            try:
                sock = socket.create_connection(
                    ("127.0.0.1", port), timeout=5, source_address=source
                )
                sock.sendall(b"POST /records HTTP/1.1\r\nhost: x\r\n")  # and never the rest
                flood.append(sock)
            except OSError:
                refused += 1
        answers = []
        for sock in flood:
            sock.settimeout(0.2)
            try:
                answers.append(sock.recv(64))
            except OSError:
                answers.append(None)
        assert sum(1 for a in answers if a and a.startswith(b"HTTP/1.1 503 ")) > 0
        for sock in flood:
            sock.close()
        deadline = time.monotonic() + 30
        while True:  # the server serves again once the flood is gone
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not recover after the flood"
            time.sleep(0.2)
    finally:
        child.stdin.close()
        child.wait(30)
    assert "out of system resource" not in log.read_text()


# -- one address must not take every connection, nor a silent one keep its slot -----------------

_HALF_OPEN_HEAD = b"POST /records HTTP/1.1\r\nhost: x\r\n"  # a request line, and never the rest


class _Peer:
    """A raw client socket whose answers are collected without ever blocking."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.received = b""
        self.closed = False

    def poll(self) -> bool:
        """Read what has arrived; whether the server has answered or closed by now."""
        while not self.closed:
            try:
                chunk = self.sock.recv(65536)
            except BlockingIOError:
                break
            except OSError:  # reset: the server closed with our bytes unread
                self.closed = True
                break
            self.received += chunk
            self.closed = not chunk
        return self.closed or bool(self.received)


def _open_from(address: str, port: int, head: bytes) -> _Peer:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(address, 0))
    if head:
        sock.sendall(head)
    return _Peer(sock)


def _refused(peers: list[_Peer]) -> list[_Peer]:
    return [p for p in peers if p.poll()]


def _closed_by_server(peer: _Peer) -> bool:
    return peer.poll() and peer.closed


async def _post_from(address: str, url: str, batches: list[list[dict[str, Any]]]) -> list[int]:
    """POST each batch from ``address``, over at most four connections at once; the statuses."""
    transport = httpx.AsyncHTTPTransport(
        local_address=address, limits=httpx.Limits(max_connections=4)
    )
    async with httpx.AsyncClient(transport=transport, timeout=10) as client:
        responses = await asyncio.gather(
            *(client.post(f"{url}/records", json=batch) for batch in batches)
        )
    return [r.status_code for r in responses]


def test_one_address_holding_its_share_leaves_room_for_everyone_else(
    store: SchemaStore, caplog: pytest.LogCaptureFixture
) -> None:
    # The finding: 300 half-open requests from one address, on a server whose descriptor
    # limit had lowered max_connections to 64, made it answer 503 to everyone.
    share = 32  # the default max_connections_per_client
    batches = [[{**GOOD, "id": f"{i}-{j}"} for j in range(5)] for i in range(20)]

    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        assert api.bound_port
        port = api.bound_port
        flood = await asyncio.to_thread(
            lambda: [_open_from("127.0.0.1", port, _HALF_OPEN_HEAD) for _ in range(300)]
        )
        try:
            await asyncio.to_thread(
                wait_until,
                lambda: len(_refused(flood)) >= 300 - 64,
                what="the server to refuse the flood past its connections",
                timeout=20,
            )
            # A well-behaved client elsewhere is served while the flood's address holds its share.
            assert await _post_from("127.0.0.2", url, batches) == [202] * len(batches)
            await asyncio.to_thread(
                wait_until,
                lambda: len(_refused(flood)) >= 300 - share,
                what=f"the server to refuse the flood's connections past {share}",
                timeout=20,
                explain=lambda: f"{len(_refused(flood))} refused",
            )
            refused = _refused(flood)
            assert len(refused) == 300 - share  # the flood's share is held, no more, no less
            # Those whose head the server had not read yet may see a reset instead of the answer.
            assert all(p.received.startswith(b"HTTP/1.1 429 ") for p in refused if p.received)
            one_more = await asyncio.to_thread(_open_from, "127.0.0.1", port, b"")
            flood.append(one_more)
            await asyncio.to_thread(
                wait_until, lambda: _closed_by_server(one_more), what="a 429", timeout=10
            )
            head, _, body = one_more.received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 429 "), one_more.received[:200]
            assert b"\r\nretry-after: " in head.lower()
            assert json.loads(body)["error"] == "too-many-connections"
            assert str(share).encode() in body
        finally:
            for peer in flood:
                peer.sock.close()

        # Its slots are back once it lets go: the same address is served again.
        def served_again() -> bool:
            try:
                return httpx.post(f"{url}/records", json=GOOD, timeout=5).status_code == 202
            except httpx.HTTPError:  # refused before the server saw the flood go: a reset
                return False

        await asyncio.to_thread(
            wait_until, served_again, what="127.0.0.1 to be served again", timeout=20
        )

    with caplog.at_level(logging.WARNING, logger="streamflow.streamlet.io"):
        emitter = run(store, scenario, max_connections=64, header_timeout="60s")
    sent = sorted(r["id"] for batch in batches for r in batch)
    assert sorted(e.value["id"] for e in emitter.acked if e.value["id"] != GOOD["id"]) == sent
    assert len(emitter.acked) == len(sent) + 1  # nothing lost, nothing twice
    warnings = [
        r.getMessage() for r in caplog.records if "max_connections_per_client" in r.getMessage()
    ]
    assert 1 <= len(warnings) < 10, warnings  # said, but not once per refused connection
    assert "127.0.0.1" in warnings[0]


def test_a_connection_without_a_request_line_is_closed_by_the_request_line_deadline(
    store: SchemaStore,
) -> None:
    # A long header_timeout: only the request_line_timeout (default 3 s) can free these slots.
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        assert api.bound_port
        port = api.bound_port
        silent, partial, line = await asyncio.to_thread(
            lambda: [
                _open_from("127.0.0.1", port, head)
                for head in (b"", b"POST /reco", b"POST /records HTTP/1.1\r\n")
            ]
        )
        try:
            # Every slot is taken: three connections on a server of three.
            await asyncio.to_thread(
                wait_until,
                lambda: _closed_by_server(silent) and _closed_by_server(partial),
                what="the server to close the connections that sent no complete line",
                timeout=15,  # well under the header_timeout: the header deadline is not it
            )
            for peer in (silent, partial):
                assert peer.received == b"" or peer.received.startswith(b"HTTP/1.1 408 ")
                if peer.received:
                    assert b"request line" in peer.received
            assert not line.poll()  # its head may take the header_timeout; the line came in time
            assert (await post(f"{url}/records", GOOD)).status_code == 202  # a freed slot
        finally:
            for peer in (silent, partial, line):
                peer.sock.close()

    emitter = run(store, scenario, max_connections=3, header_timeout="60s")
    assert len(emitter.acked) == 1


def test_the_connection_limits_are_validated() -> None:
    problems = config_problems(
        describe(ReadingApi),
        {"max_connections_per_client": 0, "request_line_timeout": "0s"},
    )
    assert problems == [
        "max_connections_per_client: 0 is below the minimum 1",
        "request_line_timeout: 0ms is shorter than the minimum 1ms",
    ]
    problems = config_problems(
        describe(ReadingApi),
        {"max_connections_per_client": "many", "request_line_timeout": "soon"},
    )
    assert problems == [
        "max_connections_per_client: expected an integer, got 'many'",
        "request_line_timeout: expected a duration such as 500ms, 5s, 2m or 1h, got 'soon'",
    ]


def test_a_client_is_its_ipv4_address_or_its_ipv6_slash_64() -> None:
    key = httpguard.client_key
    assert key(("203.0.113.7", 5000)) == "203.0.113.7"
    assert key(("203.0.113.7", 5001)) == key(("203.0.113.7", 5000))
    assert key(("203.0.113.8", 5000)) != key(("203.0.113.7", 5000))
    # One subscriber's /64 is one client, however many of its addresses it uses.
    assert key(("2001:db8:1:2::1", 5000, 0, 0)) == key(("2001:db8:1:2:ffff::9", 5000, 0, 0))
    assert key(("2001:db8:1:3::1", 5000, 0, 0)) != key(("2001:db8:1:2::1", 5000, 0, 0))
    assert key(("::ffff:203.0.113.7", 5000, 0, 0)) == "203.0.113.7"
    assert key(None) == key("") == "unknown"


# -- finding 12: authentication, the bind address, the media type -------------------------------


def test_a_record_without_a_content_type_is_415(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        async with httpx.AsyncClient() as client:
            response = await client.post(f"{url}/records", content=json.dumps(GOOD).encode())
        assert response.status_code == 415
        assert response.json()["error"] == "unsupported-media-type"

    assert run(store, scenario).acked == []


def test_the_default_bind_is_loopback() -> None:
    defaults = {p.name: p.default for p in describe(ReadingApi).params}
    assert defaults["host"] == "127.0.0.1"


def test_a_bearer_token_from_the_environment_guards_the_records(
    store: SchemaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INGRESS_TOKEN", "s3cret-token")
    body = json.dumps(GOOD).encode()

    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        missing = await post_json(f"{url}/records", body)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert missing.json()["error"] == "unauthorized"
        wrong = await post_json(f"{url}/records", body, authorization="Bearer s3cret-tokeN")
        assert wrong.status_code == 401
        basic = await post_json(f"{url}/records", body, authorization="Basic s3cret-token")
        assert basic.status_code == 401
        right = await post_json(f"{url}/records", body, authorization="Bearer s3cret-token")
        assert right.status_code == 202

    assert len(run(store, scenario, token_env="INGRESS_TOKEN").acked) == 1


def test_an_open_ingress_on_all_addresses_warns_at_start(
    store: SchemaStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        pass

    with caplog.at_level(logging.WARNING, logger="streamflow.streamlet.io"):
        run(store, scenario, host="0.0.0.0")
    assert any("no bearer token" in r.getMessage() for r in caplog.records)


# -- finding 13: JSON bombs are the client's error, not the server's ----------------------------


def test_deeply_nested_json_is_400(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post_json(f"{url}/records", b"[" * 100_000)
        assert response.status_code == 400
        assert response.json()["error"] == "malformed-json"
        assert "nested" in response.json()["message"]

    run(store, scenario)


def test_a_five_thousand_digit_integer_is_400(store: SchemaStore) -> None:
    body = b'{"id":"a","sensor":' + b"9" * 5000 + b',"value":1}'

    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post_json(f"{url}/records", body)
        assert response.status_code == 400
        assert response.json()["error"] == "malformed-json"
        assert "digits" in response.json()["message"]

    assert run(store, scenario).acked == []
