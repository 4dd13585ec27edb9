"""HttpIngress over real sockets: answers, limits, keep-alive, concurrency and shutdown.

The emitter is a fake that records what it acknowledged, can be made slow, or can
fail like an unavailable Kafka; the client is httpx, or raw bytes where the test
is about the protocol itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from streamflow import Emit, EmitError, Outlet
from streamflow.api import describe
from streamflow.schema import SchemaStore
from streamflow.streamlets.io import HttpIngress, _httpserver

from .conftest import build

pytestmark = pytest.mark.timeout(30)


class ReadingApi(HttpIngress):
    out = Outlet("out", "iotest.Reading")


class FakeEmitter:
    def __init__(self) -> None:
        self.acked: list[Emit] = []
        self.timeouts: list[float] = []
        self.failure: EmitError | None = None
        self.delay = 0.0
        self.in_flight = 0
        self.most_in_flight = 0

    async def emit(self, output: dict[str, Any] | Emit, *, timeout: float = 10.0) -> None:
        assert isinstance(output, Emit)
        self.timeouts.append(timeout)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.failure is not None:
                raise self.failure
            self.acked.append(output)
        finally:
            self.in_flight -= 1


GOOD = {"id": "a", "sensor": 1, "value": 2.5}
Scenario = Callable[[str, FakeEmitter, ReadingApi], Awaitable[None]]


def run(store: SchemaStore, scenario: Scenario, **config: Any) -> FakeEmitter:
    """Serve ``ReadingApi`` on a free port, run the scenario against it, stop serving."""
    emitter = FakeEmitter()
    api = build(ReadingApi, {"host": "127.0.0.1", "port": 0, **config}, store)

    async def main() -> None:
        async with serving(api, emitter) as url:
            await scenario(url, emitter, api)

    asyncio.run(main())
    return emitter


@contextlib.asynccontextmanager
async def serving(api: ReadingApi, emitter: FakeEmitter) -> AsyncIterator[str]:
    task = asyncio.create_task(api.serve(emitter))
    await asyncio.wait_for(api.listening.wait(), 5)
    try:
        yield f"http://127.0.0.1:{api.bound_port}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def post(url: str, body: Any = None, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return (
            await client.post(url, json=body, **kwargs)
            if body is not None
            else await client.post(url, **kwargs)
        )


# -- the happy paths ---------------------------------------------------------------------------


def test_one_record_is_acknowledged_by_kafka_then_202(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post(f"{url}/records", GOOD)
        assert response.status_code == 202
        assert response.json() == {"accepted": 1}
        [emit] = emitter.acked
        assert emit.outlet == "out"
        assert emit.value == {
            **GOOD,
            "ok": True,
            "note": None,
            "level": "LOW",
            "tags": [],
            "count": None,
            "at": None,
        }
        assert emitter.timeouts == [2.5]

    run(store, scenario, emit_timeout="2500ms")


def test_an_array_is_a_batch_in_order_on_either_route(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        batch = [{**GOOD, "id": str(i)} for i in range(5)]
        response = await post(f"{url}/", batch)
        assert (response.status_code, response.json()) == (202, {"accepted": 5})
        assert [e.value["id"] for e in emitter.acked] == ["0", "1", "2", "3", "4"]

    run(store, scenario)


def test_key_field_keys_each_record(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        assert (await post(f"{url}/records", [GOOD, {**GOOD, "sensor": 7}])).status_code == 202
        assert [e.key for e in emitter.acked] == ["1", "7"]

    run(store, scenario, key_field="sensor")


def test_healthz(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        async with httpx.AsyncClient() as client:
            health = await client.get(f"{url}/healthz")
            assert (health.status_code, health.json()) == (200, {"status": "ok"})

    run(store, scenario)


def test_port_zero_picks_a_free_port_and_logs_it(
    store: SchemaStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        assert api.bound_port

    with caplog.at_level(logging.INFO, logger="streamflow.streamlet.io"):
        run(store, scenario)
    assert any(r.getMessage().startswith("listening on http://127.0.0.1:") for r in caplog.records)


# -- invalid bodies ----------------------------------------------------------------------------


def test_malformed_json_is_400_and_nothing_is_emitted(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post(
            f"{url}/records", content=b'{"id": ', headers={"content-type": "application/json"}
        )
        assert response.status_code == 400
        assert response.json()["error"] == "malformed-json"
        assert "not valid JSON" in response.json()["message"]

    assert run(store, scenario).acked == []


def test_schema_errors_name_every_field(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post(f"{url}/records", {"sensor": "one", "value": 1, "level": "MID"})
        assert response.status_code == 400
        body = response.json()
        assert body["error"] == "invalid-records"
        by_field = {p["field"]: p["message"] for p in body["problems"]}
        assert set(by_field) == {"id", "sensor", "level"}
        assert "missing required field" in by_field["id"]
        assert "expected int" in by_field["sensor"]
        assert "not a symbol of iotest.Level" in by_field["level"]
        assert all("index" not in p for p in body["problems"])

    assert run(store, scenario).acked == []


def test_one_bad_item_rejects_the_whole_batch_by_index(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post(f"{url}/records", [GOOD, {**GOOD, "value": "high"}, GOOD, 5])
        assert response.status_code == 400
        problems = response.json()["problems"]
        assert [(p["index"], p.get("field")) for p in problems] == [(1, "value"), (3, None)]
        assert "expected a JSON object" in problems[1]["message"]

    assert run(store, scenario).acked == []


def test_a_json_scalar_body_is_400(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post(f"{url}/records", "hello")
        assert response.status_code == 400
        assert "JSON object (one record) or an array" in response.json()["problems"][0]["message"]

    run(store, scenario)


def test_a_non_json_content_type_is_415(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post(
            f"{url}/records", content=b"id=a", headers={"content-type": "text/plain"}
        )
        assert response.status_code == 415
        ok = await post(
            f"{url}/records", content=b'{"id":"a","sensor":1,"value":1}',
            headers={"content-type": "application/vnd.reading+json; charset=utf-8"},
        )  # fmt: skip
        assert ok.status_code == 202

    run(store, scenario)


def test_a_declared_length_over_the_limit_is_413_before_reading(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        response = await post(f"{url}/records", [GOOD] * 10)
        assert response.status_code == 413
        assert response.headers["connection"] == "close"
        assert (await post(f"{url}/records", GOOD)).status_code == 202  # the server is fine

    emitter = run(store, scenario, max_body_bytes=200)
    assert len(emitter.acked) == 1


def test_a_chunked_body_is_cut_off_at_the_limit(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(100):
                yield b" " * 100

        response = await post(
            f"{url}/records", content=chunks(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 413

    run(store, scenario, max_body_bytes=1000)


def test_unknown_paths_are_404_and_wrong_methods_405(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        async with httpx.AsyncClient() as client:
            assert (await client.post(f"{url}/nope", json=GOOD)).status_code == 404
            wrong = await client.get(f"{url}/records")
            assert wrong.status_code == 405
            assert wrong.headers["allow"] == "POST"
            assert (await client.post(f"{url}/healthz")).status_code == 405

    assert run(store, scenario).acked == []


# -- Kafka unavailable -------------------------------------------------------------------------


def test_an_emit_error_is_503_with_retry_after(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        emitter.failure = EmitError("broker down")
        response = await post(f"{url}/records", [GOOD, GOOD])
        assert response.status_code == 503
        assert response.headers["retry-after"] == "3"
        assert "broker down" in response.json()["message"]
        emitter.failure = None
        assert (await post(f"{url}/records", GOOD)).status_code == 202

    run(store, scenario, retry_after="2500ms")


def test_a_failure_inside_the_emitter_is_500_not_a_crash(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        emitter.failure = RuntimeError("bug")  # type: ignore[assignment]
        assert (await post(f"{url}/records", GOOD)).status_code == 500
        emitter.failure = None
        assert (await post(f"{url}/records", GOOD)).status_code == 202

    run(store, scenario)


# -- connections -------------------------------------------------------------------------------


async def exchange(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Read one response off a raw connection."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def raw_post(body: bytes, *, extra: str = "") -> bytes:
    return (
        f"POST /records HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


BODY = b'{"id":"a","sensor":1,"value":1}'


def test_keep_alive_serves_several_requests_on_one_connection(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", api.bound_port)
        for _ in range(3):
            writer.write(raw_post(BODY))
            status, headers, _ = await exchange(reader)
            assert status == 202 and "connection" not in headers
        writer.write(raw_post(b"[1]"))  # an invalid body keeps the connection too
        assert (await exchange(reader))[0] == 400
        writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await exchange(reader))[0] == 200
        # Pipelined: two requests in one write, two answers in order.
        writer.write(raw_post(BODY) + raw_post(BODY))
        assert [(await exchange(reader))[0] for _ in range(2)] == [202, 202]
        writer.close()

    assert len(run(store, scenario).acked) == 5


def test_httpx_reuses_its_connection(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        peers = set()
        async with httpx.AsyncClient() as client:
            for _ in range(5):
                response = await client.post(f"{url}/records", json=GOOD)
                assert response.status_code == 202
                stream = response.extensions["network_stream"]
                peers.add(stream.get_extra_info("client_addr"))
        assert len(peers) == 1

    run(store, scenario)


def test_expect_100_continue_and_malformed_http(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", api.bound_port)
        writer.write(
            raw_post(b"", extra="expect: 100-continue\r\n").replace(
                b"content-length: 0", f"content-length: {len(BODY)}".encode()
            )
        )
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 ")
        writer.write(BODY)
        assert (await exchange(reader))[0] == 202
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", api.bound_port)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        assert head.startswith(b"http/1.1 400 ") and b"connection: close" in head
        assert b"invalid http request" in (await reader.read()).lower()  # then closed
        writer.close()

    run(store, scenario)


def test_concurrent_requests_are_emitted_concurrently(store: SchemaStore) -> None:
    async def scenario(url: str, emitter: FakeEmitter, api: ReadingApi) -> None:
        emitter.delay = 0.05
        limits = httpx.Limits(max_connections=20)
        async with httpx.AsyncClient(limits=limits) as client:
            responses = await asyncio.gather(
                *(client.post(f"{url}/records", json={**GOOD, "id": str(i)}) for i in range(20))
            )
        assert [r.status_code for r in responses] == [202] * 20
        assert emitter.most_in_flight > 1

    emitter = run(store, scenario)
    assert sorted(int(e.value["id"]) for e in emitter.acked) == list(range(20))


# -- shutdown ----------------------------------------------------------------------------------


def test_cancelling_serve_answers_requests_in_flight_then_closes(store: SchemaStore) -> None:
    emitter = FakeEmitter()
    emitter.delay = 0.3
    api = build(ReadingApi, {"host": "127.0.0.1", "port": 0}, store)

    async def main() -> None:
        task = asyncio.create_task(api.serve(emitter))
        await api.listening.wait()
        port = api.bound_port
        async with httpx.AsyncClient() as client:
            request = asyncio.create_task(
                client.post(f"http://127.0.0.1:{port}/records", json=GOOD)
            )
            while not emitter.in_flight:
                await asyncio.sleep(0.01)
            task.cancel()
            response = await request
            assert response.status_code == 202
            assert response.headers["connection"] == "close"
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)

    asyncio.run(main())
    assert len(emitter.acked) == 1
    assert not api.listening.is_set()


def test_cancelling_serve_closes_idle_connections(store: SchemaStore) -> None:
    emitter = FakeEmitter()
    api = build(ReadingApi, {"host": "127.0.0.1", "port": 0}, store)

    async def main() -> None:
        task = asyncio.create_task(api.serve(emitter))
        await api.listening.wait()
        reader, writer = await asyncio.open_connection("127.0.0.1", api.bound_port)
        writer.write(raw_post(BODY))
        assert (await exchange(reader))[0] == 202
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()

    asyncio.run(main())


class StalledStartup:
    """Stands in for uvicorn's startup: notes the listening port, then stalls or fails."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.port: int | None = None
        self.entered = asyncio.Event()

    async def __call__(self, sockets: list[socket.socket] | None = None) -> None:
        # An instance on the class is not bound as a method: uvicorn passes sockets= alone.
        assert sockets is not None
        self.port = sockets[0].getsockname()[1]
        self.entered.set()
        if self.failure is not None:
            raise self.failure
        await asyncio.Event().wait()


def _assert_nothing_left(port: int | None, handler: Any) -> None:
    """The port binds again, no task but the test's runs, and the loop's handler is back."""
    assert port is not None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", port))  # EADDRINUSE while the ingress still listens
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert asyncio.get_running_loop().get_exception_handler() is handler


def _on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    loop.default_exception_handler(context)


def test_cancelling_serve_while_it_starts_leaves_nothing_listening(
    store: SchemaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGTERM right after the replica started: serve() is cancelled before uvicorn is up.
    startup = StalledStartup()
    monkeypatch.setattr(_httpserver._Embedded, "startup", startup)
    api = build(ReadingApi, {"host": "127.0.0.1", "port": 0}, store)

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(_on_error)
        task = asyncio.create_task(api.serve(FakeEmitter()))
        await asyncio.wait_for(startup.entered.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        _assert_nothing_left(startup.port, _on_error)

    asyncio.run(main())
    assert not api.listening.is_set()


def test_a_server_failing_to_start_says_why_and_leaves_nothing_listening(
    store: SchemaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    startup = StalledStartup(failure=RuntimeError("uvicorn could not start"))
    monkeypatch.setattr(_httpserver._Embedded, "startup", startup)
    api = build(ReadingApi, {"host": "127.0.0.1", "port": 0}, store)

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(_on_error)
        with pytest.raises(RuntimeError, match="uvicorn could not start"):
            await asyncio.wait_for(api.serve(FakeEmitter()), 5)
        _assert_nothing_left(startup.port, _on_error)

    asyncio.run(main())


def test_describes_as_a_serve_ingress() -> None:
    descriptor = describe(ReadingApi)
    assert (descriptor.shape.value, descriptor.logic, descriptor.is_async) == (
        "ingress",
        "serve",
        True,
    )
    defaults = {p.name: p.default for p in descriptor.params}
    assert defaults == {
        "host": "127.0.0.1", "port": 8000, "max_body_bytes": 1048576, "max_records": 10000,
        "token_env": "", "max_connections": 512, "max_connections_per_client": 32,
        "header_timeout": "10s", "request_line_timeout": "3s", "body_timeout": "15s",
        "idle_timeout": "5s", "key_field": "", "emit_timeout": "10s", "retry_after": "5s",
    }  # fmt: skip
