"""HttpIngress against hostile clients: issue 10, findings 10 to 13.

Each test is what an attacker does, over a real socket: a body of a third of a
million records, a drip of one byte at a time, a flood of half-open
connections, an unauthenticated or untyped request, a JSON bomb. The server
must answer each one quickly with a clear status, and keep serving everyone
else. Deadlines are checked against generous bounds, never exact times.
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
from streamflow.schema import SchemaStore

from .test_io_http import GOOD, FakeEmitter, ReadingApi, run

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

    run(store, scenario)  # the default header_timeout (10 s)


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
        for _ in range(300):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
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
