"""HttpIngress under the runtime: 202 only once Kafka has the records, and a clean shutdown.

KAFKA_E2E.md items 3 (acknowledged only after Kafka, 503 while the broker is
frozen) and 4 (``port: 0`` logs the bound port; SIGTERM answers the request in
flight, then the replica exits cleanly).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import httpx

from streamflow import devkit
from tests.streamlets.io_kafka import iohelpers as h

EMIT_TIMEOUT = 2.0


def _http_app(bootstrap: str, **config: object) -> h.Application:
    return h.make_app(
        bootstrap,
        streamlets={
            "http": {
                "class": "ioapps:EventHttp",
                "config": {"host": "127.0.0.1", "port": 0, "key_field": "id", **config},
            }
        },
        topics={"events": {"producers": ["http.out"], "partitions": 2}},
    )


def _listening(running: h.Replicas) -> int:
    h.wait(
        running,
        lambda: h.bound_port(running, "http-0") is not None,
        timeout=30,
        message="the ingress to log its port",
    )
    port = h.bound_port(running, "http-0")
    assert port is not None and port != 0
    return port


def test_accepted_means_in_kafka_and_a_frozen_broker_means_503_then_recovery(
    kafka_broker: devkit.KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    app = _http_app(bootstrap, emit_timeout=f"{EMIT_TIMEOUT:g}s", retry_after="3s")
    events = h.topic(app, "events")
    first = [h.event(i) for i in range(50)]
    with h.replicas(app, tmp_path) as running, httpx.Client(timeout=30) as client:
        running.start("http")
        url = f"http://127.0.0.1:{_listening(running)}/records"

        answer = client.post(url, json=first)
        assert answer.status_code == 202, answer.text
        assert answer.json() == {"accepted": 50}
        # 202 was sent after Kafka acknowledged: the records are readable now, no waiting
        got = {h.codec().decode(m.value())["seq"] for m in h.read_topic(bootstrap, events)}
        assert got == set(range(50))

        kafka_broker.pause()
        try:
            started = time.monotonic()
            frozen = client.post(url, json=[h.event(i) for i in range(50, 55)])
            elapsed = time.monotonic() - started
        finally:
            kafka_broker.resume()
        assert frozen.status_code == 503, frozen.text
        assert frozen.headers["retry-after"] == "3"
        assert frozen.json()["error"] == "unavailable"
        assert EMIT_TIMEOUT - 0.2 <= elapsed < EMIT_TIMEOUT + 2.0

        after = client.post(url, json=[h.event(i) for i in range(55, 60)])
        assert after.status_code == 202, after.text
        log = running.log()

    seqs = [h.codec().decode(m.value())["seq"] for m in h.read_topic(bootstrap, events)]
    assert set(range(50)) | set(range(55, 60)) <= set(seqs), log
    assert "answering 503: Kafka did not acknowledge" in log


def test_sigterm_answers_the_request_in_flight_then_exits_cleanly(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app = _http_app(kafka_bootstrap)
    body = json.dumps(h.event(7)).encode()
    with h.replicas(app, tmp_path) as running:
        replica = running.start("http")
        port = _listening(running)
        process = replica.process
        assert process is not None
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            # The head first; "100 Continue" says the server has read it: the request is in flight.
            sock.sendall(
                b"POST /records HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
            )
            assert _read_head(sock).startswith(b"HTTP/1.1 100")
            os.kill(process.pid, signal.SIGTERM)
            # Shutting down stops the listener first: wait for that, then finish the request.
            h.wait(
                running,
                lambda: not h.port_accepts(port),
                timeout=10,
                message="the listener to close",
            )
            assert process.poll() is None, "the replica exited with a request in flight"
            sock.sendall(body)
            head, answer = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 202"), head
        assert b"connection: close" in head.lower()
        assert json.loads(answer) == {"accepted": 1}
        assert process.wait(15) == 0
        log = running.log()
    assert "stopped listening on port" in log and "stopped cleanly" in log, log
    [record] = h.read_topic(kafka_bootstrap, h.topic(app, "events"))
    assert record.key() == h.event(7)["id"].encode()


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while chunk := sock.recv(4096):  # the server closes the connection after the answer
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body
