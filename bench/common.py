"""Pieces shared by the benchmark driver and its child processes.

The children talk to the driver through one-line JSON reports on stdout
(``BENCH {...}``), stamped with ``time.monotonic()``: on Linux that clock is
system-wide, so a child's "first batch consumed" and the driver's "output topic
complete" are on the same timeline without any clock-sync games.

The hand-written competitor must not import streamflow, so the schema, the
single-object header and the client settings it needs are built here from
fastavro and confluent-kafka alone. So are the other topic formats the
benchmark writes (:class:`Wire`): the Confluent registry wire format (byte 0,
a 4-byte schema id, the Avro body) and plain JSON, with bytes as base64.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any, cast

import confluent_kafka
import fastavro
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported in stubs
    AdminClient,
    NewTopic,
    OffsetSpec,
)

REPO = Path(__file__).resolve().parent.parent
# The peers' interpreter: bench/setup-peers makes it, so no peer is a project dependency.
PEERS_PYTHON = REPO / "bench" / ".venv" / "bin" / "python"
MODELSERVER_PYTHON = REPO / "tools" / "modelserver" / ".venv" / "bin" / "python"
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
SCHEMA_FILE = SCHEMA_DIR / "PassRecord.avsc"
SCHEMA_NAME = "bench.PassRecord"
SCHEMA_HEADER: list[tuple[str, str | bytes | None]] = [("streamflow-schema", SCHEMA_NAME.encode())]
REPORT_PREFIX = "BENCH "
PARTITIONS = 4

# The librdkafka settings the runtime uses (streamflow/runtime/clients.py at the time
# of writing). The hand-written loop uses the same ones, so the comparison measures
# the Python work around the clients, not a difference in batching or acks. The driver
# checks them against the runtime's (see passthrough.settings_drift).
PRODUCER_SETTINGS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 65_536,
}
CONSUMER_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": True,
    "enable.auto.offset.store": False,
    "auto.commit.interval.ms": 1000,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "partition.assignment.strategy": "cooperative-sticky",
    "fetch.wait.max.ms": 50,
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 2_000,
    "queued.max.messages.kbytes": 32_768,
    "fetch.queue.backoff.ms": 100,
}


# -- schema and topic formats ----------------------------------------------------

AVRO, AVRO_REGISTRY, JSON = "avro", "avro-registry", "json"
FORMATS = (AVRO, AVRO_REGISTRY, JSON)  # streamflow's topic formats the benchmark writes


def load_schema(path: Path = SCHEMA_FILE) -> tuple[Any, bytes]:
    """The parsed schema and its 10-byte single-object header (C3 01 + CRC-64-AVRO, LE)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    parsed = fastavro.parse_schema(raw)
    canonical = fastavro.schema.to_parsing_canonical_form(parsed)
    digest = fastavro.schema.fingerprint(canonical, "CRC-64-AVRO")
    return parsed, b"\xc3\x01" + bytes.fromhex(digest)  # fastavro gives the LE bytes


def encode(parsed: Any, header: bytes, value: dict[str, Any]) -> bytes:
    buf = BytesIO()
    buf.write(header)
    fastavro.schemaless_writer(buf, parsed, value)
    return buf.getvalue()


def json_default(value: Any) -> Any:
    """Bytes as base64, as streamflow's JSON codec writes them."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def subject(topic: str) -> str:
    """The registry subject of a topic's values (the topic-name strategy, streamflow's)."""
    return f"{topic}-value"


def registry_id(url: str, topic: str, path: Path = SCHEMA_FILE) -> int:
    """Register the schema under ``topic``'s subject (or find it there); its id."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    text = json.dumps(json.loads(path.read_text(encoding="utf-8")), separators=(",", ":"))
    return int(SchemaRegistryClient({"url": url}).register_schema(subject(topic), Schema(text)))


def registry_schema(url: str, schema_id: int) -> Any:
    """The parsed Avro schema the registry holds under ``schema_id``."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    found = SchemaRegistryClient({"url": url}).get_schema(schema_id)
    return fastavro.parse_schema(json.loads(found.schema_str or "{}"))


class Wire:
    """A record's value on a topic of one format; what every bench producer writes.

    ``avro``: the single-object header and the Avro body; ``avro-registry``: byte 0
    and the schema id the registry gave under ``topic``'s subject, then the Avro
    body; ``json``: a JSON object, bytes as base64.
    """

    def __init__(
        self, fmt: str, *, topic: str, registry: str | None, path: Path = SCHEMA_FILE
    ) -> None:
        self.format = fmt
        self.parsed, header = load_schema(path)
        if fmt == AVRO_REGISTRY:
            if not registry:
                raise ValueError("the avro-registry format needs a schema registry URL")
            header = b"\x00" + registry_id(registry, topic, path).to_bytes(4, "big")
        elif fmt not in (AVRO, JSON):
            raise ValueError(f"unknown topic format {fmt!r}: use one of {', '.join(FORMATS)}")
        self.header = header if fmt != JSON else b""

    def encode(self, value: dict[str, Any]) -> bytes:
        if self.format == JSON:
            return json.dumps(value, default=json_default, separators=(",", ":")).encode()
        return encode(self.parsed, self.header, value)

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record (bytes fields stay base64 text in JSON: the probe reads numbers only)."""
        if self.format == JSON:
            doc: dict[str, Any] = json.loads(data)
            return doc
        source = BytesIO(data)
        source.seek(len(self.header))
        record: Any = fastavro.schemaless_reader(source, self.parsed, None)
        return cast(dict[str, Any], record)


def payload_length(wire: Wire, size: int) -> int:
    """The payload length that makes an encoded record ``size`` bytes (or just over)."""
    for length in range(size):
        if len(wire.encode(make_record(0, b"x" * length))) >= size:
            return length
    raise ValueError(f"a record cannot be as small as {size} bytes")


def make_record(seq: int, payload: bytes) -> dict[str, Any]:
    return {
        "id": f"id-{seq:09d}",
        "seq": seq,
        "score": seq / 7.0,
        "count": seq % 1000,
        "created_ms": 1_700_000_000_000 + seq,
        "payload": payload,
    }


def prefill(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    size: int,
    fmt: str = AVRO,
    registry: str | None = None,
) -> int:
    """Write ``records`` keyed records in the topic's format; returns their encoded size.

    Payloads are seeded random bytes, so lz4 cannot shrink the 1 KB case to nothing.
    """
    wire = Wire(fmt, topic=topic, registry=registry)
    length = payload_length(wire, size)
    rng = random.Random(size)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
    )
    encoded_size = 0
    for seq in range(records):
        value = wire.encode(make_record(seq, rng.randbytes(length)))
        encoded_size = len(value)
        key = f"id-{seq:09d}".encode()
        while True:
            try:
                producer.produce(topic, value, key, headers=SCHEMA_HEADER)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"prefill of {topic} did not complete")
    return encoded_size


# -- topics and offsets --------------------------------------------------------


class Topics:
    """Creates, counts and deletes the benchmark's own topics (and only those)."""

    def __init__(self, bootstrap: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.created: list[str] = []

    def create(
        self, name: str, *, partitions: int = PARTITIONS, config: dict[str, str] | None = None
    ) -> None:
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=-1, config=config or {}
        )
        self.admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
        self.created.append(name)
        deadline = time.monotonic() + 30
        while self._leaderless(name, partitions):
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} has no leaders after 30 s")
            time.sleep(0.05)

    def _leaderless(self, name: str, partitions: int) -> bool:
        meta = self.admin.list_topics(topic=name, timeout=10).topics.get(name)
        if meta is None or meta.error is not None or len(meta.partitions) != partitions:
            return True
        return any(p.leader < 0 for p in meta.partitions.values())

    def end_offsets(self, name: str, *, partitions: int = PARTITIONS) -> int:
        """The sum of the partitions' end offsets: the records written so far."""
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(name, p): latest for p in range(partitions)}
        futures = self.admin.list_offsets(request, request_timeout=10)
        return sum(future.result().offset for future in futures.values())

    def delete(self, name: str) -> None:
        self.admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)
        self.created.remove(name)

    def delete_all(self) -> None:
        for name in list(self.created):
            try:
                self.delete(name)
            except Exception as exc:
                print(f"warning: could not delete topic {name}: {exc}", file=sys.stderr)


# -- child reports and CPU -------------------------------------------------------


def cpu_self() -> float:
    """User + system CPU seconds of this process, all threads (librdkafka's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc (clock-tick resolution)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def report(event: str, **fields: Any) -> None:
    """One line for the driver: when (monotonic) and how much CPU, plus ``fields``."""
    line = json.dumps({"event": event, "t": time.monotonic(), "cpu": cpu_self(), **fields})
    sys.stdout.write(REPORT_PREFIX + line + "\n")
    sys.stdout.flush()


def parse_report(line: str) -> dict[str, Any] | None:
    """The report on a line, if any; found anywhere on it, since faust's worker writes
    terminal escapes (its spinner) in front of whatever comes next on stdout."""
    at = line.find(REPORT_PREFIX)
    if at < 0:
        return None
    parsed: dict[str, Any] = json.loads(line[at + len(REPORT_PREFIX) :])
    return parsed


# -- the broker ------------------------------------------------------------------


@contextmanager
def broker(bootstrap: str | None) -> Iterator[tuple[str, str]]:
    """``(bootstrap, description)``: the given broker, or a devkit one for this run only."""
    if bootstrap:
        yield bootstrap, "external"
        return
    from streamflow import devkit  # only when we own the broker (peers never get here)

    owned = devkit.KafkaBroker(heap="1g")
    owned.start()
    try:
        yield owned.bootstrap_servers, "devkit (KRaft, 1 GB heap)"
    finally:
        owned.stop()


REGISTRY_ENV = "STREAMFLOW_SCHEMA_REGISTRY_URL"


@contextmanager
def schema_registry(url: str | None) -> Iterator[tuple[str, str]]:
    """``(url, description)``: the given registry, or a devkit one (Apicurio) for this run only."""
    if url:
        yield url, "external"
        return
    from streamflow import devkit  # only when we own the registry (peers never get here)

    owned = devkit.SchemaRegistry()
    try:
        owned.start()
    except devkit.DevkitError as exc:
        raise SystemExit(
            f"{exc}\nOr name a registry (--registry, ${REGISTRY_ENV}), "
            "or leave avro-registry out: --formats avro json"
        ) from None
    try:
        yield owned.url, "devkit (Apicurio, in memory)"
    finally:
        owned.stop()


# -- where the numbers came from ----------------------------------------------

_VERSIONS_SCRIPT = """
import json, sys
from importlib.metadata import PackageNotFoundError, version
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = version(name)
    except PackageNotFoundError:
        pass
print(json.dumps(out))
"""


def competitor_versions() -> dict[str, dict[str, str]]:
    """Package versions in each interpreter a competitor runs from, asked of that interpreter.

    Asked rather than imported: the peers' packages exist only in bench/.venv, and the
    model server's only in its own virtualenv.
    """
    wanted = {
        "streamflow": (sys.executable, ["streamflow", "confluent-kafka", "fastavro"]),
        "serving": (
            sys.executable,
            ["tensorflow-cpu", "tensorflow", "keras", "numpy", "httpx", "onnx", "onnxruntime"],
        ),
        "peers": (
            str(PEERS_PYTHON),
            ["quixstreams", "faust-streaming", "aiokafka", "confluent-kafka", "fastavro"],
        ),
        "modelserver": (str(MODELSERVER_PYTHON), ["kserve", "tensorflow-cpu"]),
    }
    versions: dict[str, dict[str, str]] = {}
    for group, (python, names) in wanted.items():
        try:
            done = subprocess.run(
                [python, "-c", _VERSIONS_SCRIPT, *names],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            versions[group] = json.loads(done.stdout)
        except (OSError, subprocess.SubprocessError, ValueError):
            versions[group] = {}
    if versions["streamflow"]:
        versions["streamflow"]["librdkafka"] = confluent_kafka.libversion()[0]
    return versions


def environment() -> dict[str, Any]:
    """Versions and machine facts stored next to the results."""
    return {
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "fastavro": fastavro.__version__,
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()
