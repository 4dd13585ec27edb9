"""What a devkit Kafka broker is made of: its JVM command, its settings, its storage.

:mod:`.kafka` runs the broker (start, readiness, stop, faults); this module holds
the parts it is built from, each for a reason given where it is:

* the JVM's flags, sized for a 2-core laptop (serial GC, the C1 compiler only);
* ``server.properties`` for one KRaft node in combined mode with a static quorum
  (so a reused work dir still starts when its ports change), few threads and
  small internal topics;
* storage formatted with a fresh cluster id, and ports picked from the OS.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from streamflow.devkit import _local
from streamflow.devkit._local import DevkitError
from streamflow.devkit.java import SERVICE_FLAGS

__all__ = [
    "HOST",
    "NODE_ID",
    "cluster_id",
    "escape",
    "format_storage",
    "free_ports",
    "jvm_command",
    "server_settings",
]

HOST = "127.0.0.1"
NODE_ID = 1

_LEAN_SETTINGS: Mapping[str, str] = {
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "group.coordinator.threads": "1",
    "log.segment.bytes": str(16 * 1024 * 1024),
    "log.index.size.max.bytes": str(1024 * 1024),
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "group.share.enable": "false",
    # After a crash the controller keeps the dead incarnation's registration until
    # this session expires (default 9 s); shorter makes `restart(hard=True)` ~4 s.
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    # The controller's no-op record every 500 ms (a liveness signal for monitoring only)
    # was a third of an idle broker's CPU: 1.6 -> 1.1 CPU s a minute without it.
    "metadata.max.idle.interval.ms": "0",
}

_LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")


def server_settings(
    *,
    plaintext: int,
    controller: int,
    data: Path,
    host: str = HOST,
    proxied: tuple[int, str] | None = None,
) -> dict[str, str]:
    # Clients connect to `host` (loopback unless the broker must be reached from
    # elsewhere, such as a real pod's network namespace); the controller stays on loopback.
    listeners = f"PLAINTEXT://{host}:{plaintext},CONTROLLER://{HOST}:{controller}"
    advertised = f"PLAINTEXT://{host}:{plaintext}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if proxied is not None:
        # A client that came in through the proxy is sent back to it, never around it.
        port, address = proxied
        listeners += f",PROXIED://{host}:{port}"
        advertised += f",PROXIED://{address}"
        protocols += ",PROXIED:PLAINTEXT"
    return {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{HOST}:{controller}",
        "listeners": listeners,
        "advertised.listeners": advertised,
        "listener.security.protocol.map": protocols,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        **_LEAN_SETTINGS,
    }


def jvm_command(*, java: Path, lib: Path, work_dir: Path, heap: str) -> list[str]:
    return [
        str(java),
        f"-Xmx{heap}",
        f"-Xms{heap}",
        *SERVICE_FLAGS,
        f"-Dlog4j2.configurationFile={_LOG4J2_CONFIG}",
        f"-Dstreamflow.kafka.log.file={work_dir / 'broker.log'}",
        "-cp",
        str(lib / "*"),
    ]


def format_storage(
    jvm: list[str], *, work_dir: Path, config: Path, extra: Sequence[str] = ()
) -> None:
    """Write meta.properties and the bootstrap metadata into a fresh data dir."""
    command = [
        *jvm,
        "kafka.tools.StorageTool",
        "format",
        "--cluster-id",
        cluster_id(),
        "--config",
        str(config),
        *extra,
    ]
    result = subprocess.run(command, cwd=work_dir, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DevkitError(
            f"Formatting Kafka storage in {work_dir} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )


def cluster_id() -> str:
    """A Kafka-style cluster id: URL-safe base64 of a random UUID, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def free_ports(host: str = HOST, *, client_listeners: int = 1) -> tuple[int, ...]:
    """Free ports for the client listeners (on ``host``), then the controller (on loopback)."""
    return _local.free_ports(hosts=[host] * client_listeners + [HOST])


def escape(value: str) -> str:
    """Escape for java.util.Properties, which treats backslashes as escapes."""
    return value.replace("\\", "\\\\")
