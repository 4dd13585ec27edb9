"""Helpers for the registry-format tests: an app on registry topics, its inputs and metrics,
and what confluent-kafka's own serializers need.

What a test asserts is absent (no output, no dead letter) it reads with
`read_topic`: every record up to the topic's end as of the call, so the
answer does not depend on how long a consumer happened to wait.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Message
from confluent_kafka.serialization import MessageField, SerializationContext

from streamflow.blueprint.model import Application
from streamflow.operator.local import ReplicaProcess
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.registry import ConfluentRegistry
from streamflow.runtime.topics import ensure_topics
from streamflow.schema.formats import subject_for
from streamflow.schema.registry_codecs import RegistryAvroCodec
from tests.runtime import support
from tests.streamlets.io_kafka.iohelpers import read_topic
from tests.waiting import wait_until

__all__ = [
    "ERROR_HEADERS",
    "OLDER_READING",
    "READING",
    "SCALED",
    "RegistryRoute",
    "avro_inputs",
    "keys",
    "metric",
    "no_more_than",
    "read_topic",
    "reading",
    "registry_app",
    "scaled_outputs",
    "unready_reasons",
    "value_context",
    "wait_showing_log",
]

READING = support.STORE.get("tests.runtime.Reading")
SCALED = support.STORE.get("tests.runtime.Scaled")
ERROR_HEADERS = support.ERROR_HEADERS
# An older version of Reading, without `poison`: what a producer that has not upgraded writes.
OLDER_READING = {
    **READING.raw,
    "fields": [f for f in READING.raw["fields"] if f["name"] != "poison"],
}


def registry_app(
    bootstrap: str, registry_url: str, *, in_format: str, out_format: str, partitions: int = 2
) -> Application:
    """`apps:Scale` from an `in` topic to an `out` topic in the given formats; topics made."""
    suffix = uuid.uuid4().hex[:8]
    app = Application.from_dict(
        {
            "name": f"t{suffix}",
            "schema_paths": [str(support.HERE / "schemas")],
            "python_paths": [str(support.HERE)],
            "kafka": {
                "bootstrap": bootstrap,
                "schema_registry": registry_url,
                "register": "auto",
            },
            "streamlets": {"scale": {"class": "apps:Scale"}},
            "topics": {
                f"in-{suffix}": {
                    "consumers": ["scale.in"],
                    "partitions": partitions,
                    "format": in_format,
                },
                f"out-{suffix}": {"producers": ["scale.out"], "format": out_format},
            },
        }
    )
    ensure_topics(KafkaClients(bootstrap=bootstrap).admin(), app)
    return app


def scaled_outputs(
    bootstrap: str, app: Application, tmp_path: Path, inputs: list[tuple[str, bytes]]
) -> list[Message]:
    """``inputs`` through a `registry_app`: produced to its `in` topic, then its `scale`
    replica started and its `out` topic read until one output for each, and never more;
    those outputs. Fewer fails the test, with the replica's log."""
    support.produce(bootstrap, support.topic(app, "in"), inputs)
    with support.replicas(app, tmp_path) as running:
        running.start("scale")
        out = support.consume_until(
            bootstrap, support.topic(app, "out"), lambda records: no_more_than(records, len(inputs))
        )
        assert len(out) == len(inputs), running.log()
    return out


def value_context(topic: str) -> SerializationContext:
    """What confluent-kafka's serializers are called with for a record's value on ``topic``."""
    return SerializationContext(topic, MessageField.VALUE)


def reading(i: int) -> dict[str, Any]:
    return {"id": f"r{i}", "seq": i, "value": float(i), "poison": False}


def avro_inputs(registry_url: str, topic: str, seqs: range) -> list[tuple[str, bytes]]:
    codec = RegistryAvroCodec(
        READING, ConfluentRegistry(registry_url), subject=subject_for(topic), register=True
    )
    return [(f"r{i}", codec.encode(reading(i))) for i in seqs]


def keys(messages: list[Message]) -> set[str]:
    return {m.key().decode() for m in messages}


def no_more_than(records: list[Message], n: int) -> bool:
    assert len(records) <= n, f"{len(records)} records, expected {n}"
    return len(records) == n


def metric(replica: ReplicaProcess, name: str, **labels: str) -> float:
    """The sum of a replica's Prometheus samples of ``name`` with ``labels``.

    Read from the replica's first process only: a counter read as 0 must mean
    "none counted", never "nobody answered" or "counting began again".
    """
    text = _health(replica, "/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items())
    )


def unready_reasons(replica: ReplicaProcess) -> list[str]:
    """Why ``/readyz`` says the replica is not ready (empty when it is)."""
    return list(_health(replica, "/readyz").json()["reasons"])


def _health(replica: ReplicaProcess, path: str) -> httpx.Response:
    """A GET of the replica's health endpoint; a replica that died or restarted fails the test."""
    restarted = f"{replica.name} was restarted: what its first process counted is gone"
    deadline = time.monotonic() + 15  # a busy machine may answer slowly, never not at all
    while True:
        assert replica.restarts == 0, restarted
        try:
            answer = httpx.get(f"http://127.0.0.1:{replica.health_port}{path}", timeout=5)
        except httpx.HTTPError as exc:
            if not replica.running or time.monotonic() > deadline:
                code = replica.process.poll() if replica.process else None
                state = "running" if code is None else f"exited with {code}"
                raise AssertionError(f"{replica.name} ({state}) did not answer: {exc}") from None
            time.sleep(0.2)  # a retry interval, not a synchronisation
            continue
        assert replica.restarts == 0, restarted
        return answer


def wait_showing_log(
    condition: Callable[[], bool], running: support.Replicas, *, timeout: float, message: str
) -> None:
    """:func:`wait_until`, with the replicas' log in the failure."""
    wait_until(condition, what=message, timeout=timeout, explain=running.log)


class RegistryRoute:
    """A TCP proxy to a registry that a test can cut and restore: an outage on demand.

    While cut, every connection (open ones too) is closed at once, as a registry
    that crashed or a network that dropped would close it; the registry behind
    it keeps its subjects and ids, so the same ids resolve once restored. Closed on
    leaving a ``with`` block.
    """

    def __init__(self, upstream_url: str) -> None:
        parsed = urllib.parse.urlsplit(upstream_url)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = parsed._replace(netloc=f"127.0.0.1:{port}").geturl()
        self._up = threading.Event()
        self._up.set()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self._up.clear()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._open.clear()

    def restore(self) -> None:
        self._up.set()

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def __enter__(self) -> RegistryRoute:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            if not self._up.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self._upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with self._lock:
            self._open.difference_update((source, sink))
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
