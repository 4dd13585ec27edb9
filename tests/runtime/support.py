"""Helpers for runtime tests: build apps, produce inputs, read outputs, run replicas."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from streamflow.blueprint.model import Application
from streamflow.operator.local import ProcessGroup, ReplicaProcess, replica_command
from streamflow.operator.local.processes import free_port
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.topics import ensure_topics
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.waiting import wait_until

HERE = Path(__file__).parent
STORE = SchemaStore([HERE / "schemas"])
# The headers a dead letter carries: what failed, and where its record came from.
ERROR_HEADERS = (
    "streamflow-error",
    "streamflow-error-type",
    "streamflow-source-topic",
    "streamflow-source-partition",
    "streamflow-source-offset",
)


def codec(name: str) -> SingleObjectCodec:
    return SingleObjectCodec(STORE.get(name), store=STORE)


def make_app(
    bootstrap: str,
    *,
    streamlets: dict[str, dict[str, Any]],
    topics: dict[str, dict[str, Any]],
    kafka_config: dict[str, str] | None = None,
    schema_paths: list[Path] | None = None,
    python_paths: list[Path] | None = None,
) -> Application:
    """An application with unique topic names, its topics created."""
    suffix = uuid.uuid4().hex[:8]
    renamed = {f"{name}-{suffix}": spec for name, spec in topics.items()}
    app = Application.from_dict(
        {
            "name": f"t{suffix}",
            "schema_paths": [str(p) for p in schema_paths or [HERE / "schemas"]],
            "python_paths": [str(p) for p in python_paths or [HERE]],
            "kafka": {"bootstrap": bootstrap, "config": kafka_config or {}},
            "streamlets": streamlets,
            "topics": renamed,
        }
    )
    ensure_topics(KafkaClients(bootstrap=bootstrap).admin(), app)
    return app


def topic(app: Application, prefix: str) -> str:
    return next(name for name in app.topics if name.startswith(prefix + "-"))


def produce(bootstrap: str, topic_name: str, items: list[tuple[str | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in items:
        while True:
            try:
                producer.produce(topic_name, value, key.encode() if key else None)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def readings(n: int, *, start: int = 0, poison: set[int] | None = None) -> list[tuple[str, bytes]]:
    c = codec("tests.runtime.Reading")
    poison = poison or set()
    return [
        (f"r{i}", c.encode({"id": f"r{i}", "seq": i, "value": float(i), "poison": i in poison}))
        for i in range(start, start + n)
    ]


def consume_until(
    bootstrap: str,
    topic_name: str,
    done: Callable[[list[Message]], bool],
    *,
    timeout: float = 60.0,
    read_committed: bool = True,
) -> list[Message]:
    """Every record of a topic from the start, until ``done(records)`` or the timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    meta = consumer.list_topics(topic_name, timeout=10).topics[topic_name]
    consumer.assign([TopicPartition(topic_name, p, 0) for p in meta.partitions])
    records: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while not done(records) and time.monotonic() < deadline:
            records += [m for m in consumer.consume(1000, 0.2) if m.error() is None]
    finally:
        consumer.close()
    return records


def count_at_least(n: int) -> Callable[[list[Message]], bool]:
    return lambda records: len(records) >= n


class Replicas:
    """Replica processes of an app, through the same entry point as a pod."""

    def __init__(self, app: Application, spec_dir: Path) -> None:
        self.app = app
        self.spec = spec_dir / "app.json"
        self.spec.write_text(__import__("json").dumps(app.to_dict()))
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.group = ProcessGroup(on_line=self._line, on_event=self.lines.append)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, daemon=True)
        self._thread.start()

    def _line(self, replica: ReplicaProcess, line: str) -> None:
        with self._lock:
            self.lines.append(f"{replica.name}| {line}")

    def _supervise(self) -> None:
        while not self._stop.wait(0.2):
            self.group.supervise_once()

    def start(
        self, streamlet: str, replica: int = 0, *, extra_args: tuple[str, ...] = ()
    ) -> ReplicaProcess:
        port = free_port()
        process = ReplicaProcess(
            streamlet=streamlet,
            replica=replica,
            health_port=port,
            command=replica_command(
                app_spec=self.spec,
                streamlet=streamlet,
                replica=replica,
                bootstrap=str(self.app.kafka.bootstrap),
                health_port=port,
            )
            + list(extra_args),
        )
        self.group.add(process)
        return process

    def stop(self) -> None:
        self._stop.set()
        self.group.stop()

    def log(self) -> str:
        with self._lock:
            return "\n".join(self.lines[-200:])


@contextlib.contextmanager
def replicas(app: Application, tmp_path: Path) -> Iterator[Replicas]:
    running = Replicas(app, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def wait_for(condition: Callable[[], object], *, timeout: float, message: str) -> None:
    """:func:`tests.waiting.wait_until` under its former name, which the chaos tests still call."""
    wait_until(condition, what=message, timeout=timeout)
