"""A real single-node Apache Kafka, started from jars as a local JVM.

Why a JVM from jars, and not Docker or a fake: the runtime's guarantees
(transactions, read_committed, consumer-group rebalances, compacted control
topics) are Kafka's, so tests and `streamflow run` need the real broker. Docker
is not everywhere; a JDK is, and the pinned Kafka jars are fetched from Maven
Central into the user's cache on first use (:mod:`streamflow.devkit.kafka_jars`).

Design choices, each for a reason:

* One process in KRaft combined mode (broker + controller, node 1), on
  127.0.0.1 ports (or, with ``host=``, a client listener on an address that a
  real pod's network can reach) picked at first start and kept for the object's lifetime, so
  `restart()` comes back on the same address with the same log dirs and a
  client that survives the outage sees the same cluster.
* With ``advertised=`` (a proxy's address), a second client listener tells
  the clients that connect to it to come back through that address, so a
  fault-injecting proxy stays between them and the broker after the first
  metadata answer. It is a listener apart: the broker's own connections (the
  transaction markers it writes to itself) and the devkit's set-up keep the
  direct one, so only the clients routed through the proxy suffer its faults.
* A static quorum (`controller.quorum.voters`) rather than a dynamic one: the
  controller's address then lives only in the config, never in the metadata
  log, so a reused `work_dir` still starts when its ports change.
* Settings sized for a 2-core laptop: few threads, small internal topics, a
  small log-cleaner buffer, serial GC and a fixed small heap.
* WARN and above go to `broker.log` in the work dir, JVM output to `jvm.out`;
  both are quoted back when the broker fails, so a failure explains itself.
* The JVM runs in its own session, so Ctrl-C in a terminal reaches only us and
  we stop the broker in order; an atexit hook stops any broker still running.
* Readiness is a condition (the port accepts, then an AdminClient gets
  metadata with a broker in it, then an idempotent producer is given a
  producer id), polled until a deadline, never a fixed sleep. A broker that
  answers metadata but gives no producer id is started once more.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from confluent_kafka import Producer

# NewTopic is documented in confluent_kafka.admin but its stubs do not re-export it.
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from streamflow.devkit import _local, kafka_config, kafka_jars
from streamflow.devkit._local import DevkitError
from streamflow.devkit.fetch_progress import Progress
from streamflow.devkit.java import ClassArchive, find_java, require_java

__all__ = ["DevkitError", "KafkaBroker", "create_topic", "find_java", "find_kafka_lib"]

_HOST = kafka_config.HOST
_FETCH_HINT = (
    "`streamflow devkit fetch` fetches the pinned Kafka jars into the user's cache "
    "(`--lib-dir DIR` into another folder; in a checkout, `tools/fetch-kafka`)."
)
_LIB_ENV = "STREAMFLOW_KAFKA_LIB"
_LIB_RELATIVE = Path("tools") / "kafka" / "lib"
_BROKER_JAR_GLOB = "kafka_2.13-*.jar"
_STOP_GRACE_S = 15.0
_PRODUCER_ID_WAIT_S = 15.0  # a fresh broker gives one in about 1 s
_LAUNCHES = 2  # a JVM that answers but gives no producer id is started once more
# A port found free is free only until someone binds it: on a busy machine an outgoing
# connection (ports come from the same ephemeral range) or another test's server can take
# it first, and the JVM exits saying so. A broker on ports it picked starts on new ones.
_PORT_LAUNCHES = 2
_PORT_TAKEN = "Address already in use"


class _PortTaken(DevkitError):
    """The broker exited while starting because one of its ports was taken."""


_POLL_INTERVAL_S = 0.1


def find_kafka_lib(
    *, lib_dir: Path | None = None, fetch: bool = False, progress: Progress | None = None
) -> Path:
    """Where the Kafka jars are: `lib_dir`, `$STREAMFLOW_KAFKA_LIB`, `tools/kafka/lib`, or
    the user's cache, in that order.

    `tools/kafka/lib` (a checkout's) is searched upwards from the current directory
    and from this package. With `fetch`, a cache that is not complete yet is filled
    (see :mod:`streamflow.devkit.kafka_jars`), ``progress`` showing how it goes.
    """
    explicit = lib_dir or (Path(env) if (env := os.environ.get(_LIB_ENV)) else None)
    if explicit is not None:
        return _checked_lib(explicit.expanduser())
    found = _local.find_upwards(_LIB_RELATIVE)
    if found is not None and any(found.glob(_BROKER_JAR_GLOB)):
        return found.resolve()
    cached = kafka_jars.cached_lib()
    if kafka_jars.is_complete(cached):
        return cached.resolve()
    if fetch:
        return kafka_jars.fetch(cached, progress=progress).resolve()
    raise DevkitError(
        f"No Kafka jars found: {cached} is not fetched yet, {_LIB_RELATIVE} is not above "
        f"{Path.cwd()} or the streamflow package, and ${_LIB_ENV} is not set. {_FETCH_HINT}"
    )


def _checked_lib(lib: Path) -> Path:
    if not lib.is_dir():
        raise DevkitError(f"The Kafka lib folder {lib} does not exist. {_FETCH_HINT}")
    if not any(lib.glob(_BROKER_JAR_GLOB)):
        raise DevkitError(f"{lib} holds no Kafka broker jar ({_BROKER_JAR_GLOB}). {_FETCH_HINT}")
    return lib.resolve()


class KafkaBroker(_local.LocalService):
    """A single-node KRaft Kafka in a child JVM; see the module docstring."""

    def __init__(
        self,
        *,
        lib_dir: Path | None = None,
        work_dir: Path | None = None,
        heap: str = "384m",
        keep: bool = False,
        overrides: Mapping[str, str | int] | None = None,
        jvm_options: Sequence[str] = (),
        host: str = _HOST,
        advertised: str | None = None,
    ) -> None:
        """``advertised`` (``host:port``, e.g. a proxy's listen address) adds the
        `proxied_listener`, which advertises that address; see the module docstring."""
        self._lib_dir = lib_dir
        self._host = host
        self._advertised = advertised
        self._proxied_port: int | None = None
        self._given_work_dir = work_dir
        self._heap = heap
        self._keep = keep
        self._overrides = {key: str(value) for key, value in (overrides or {}).items()}
        self._jvm_options = tuple(jvm_options)
        self._work_dir: Path | None = None
        self._ports: tuple[int, int] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._archive: ClassArchive | None = None
        self._recording: Path | None = None  # the class archive this JVM writes as it exits

    def __repr__(self) -> str:
        where = self.bootstrap_servers if self._ports else "not started"
        return f"KafkaBroker({where}, running={self.is_running})"

    @property
    def bootstrap_servers(self) -> str:
        """`<host>:<port>` of the PLAINTEXT listener; stable across `restart()`."""
        if self._ports is None:
            raise DevkitError("The Kafka broker has not been started.")
        return f"{self._host}:{self._ports[0]}"

    @property
    def proxied_listener(self) -> str:
        """`<host>:<port>` of the listener that advertises ``advertised``: where a proxy
        in front of the broker forwards to. Stable across `restart()`."""
        if self._advertised is None:
            raise DevkitError("This Kafka broker was made without `advertised`: it has no proxy.")
        if self._proxied_port is None:
            raise DevkitError("The Kafka broker has not been started.")
        return f"{self._host}:{self._proxied_port}"

    @property
    def work_dir(self) -> Path | None:
        """The folder with server.properties, the logs and the data, once started."""
        return self._work_dir

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout: float = 60.0) -> None:
        """Start the broker (reusing ports and data if it ran before) and wait until it answers."""
        if self.is_running:
            return
        java = require_java()  # before a first fetch: an old Java would waste it
        lib = find_kafka_lib(lib_dir=self._lib_dir, fetch=True)
        work_dir = self._prepare_work_dir()
        # ports given, or kept from an earlier start (`restart()` comes back on them), stay
        picks = self._ports is None
        deadline = time.monotonic() + timeout
        for attempt in range(1, _PORT_LAUNCHES + 1):
            if picks:
                self._pick_ports()
            launch = self._launcher(java, lib, work_dir)
            try:
                self._run_until_ready(launch, deadline=deadline)
                return
            except _PortTaken:
                self._terminate(grace=0.0)
                if not picks or attempt == _PORT_LAUNCHES:
                    raise
                # the quorum is static: the same data starts on other ports
                self._note("streamflow: a port was taken before Kafka bound it; new ports")
            except BaseException:
                self._terminate(grace=_STOP_GRACE_S)
                raise

    def _pick_ports(self) -> None:
        """Ports free now for every listener (a subclass with more listeners adds them)."""
        listeners = 2 if self._advertised is not None else 1
        *clients, controller = kafka_config.free_ports(self._host, client_listeners=listeners)
        self._ports = (clients[0], controller)
        self._proxied_port = clients[1] if self._advertised is not None else None

    def _launcher(
        self, java: Path, lib: Path, work_dir: Path
    ) -> Callable[[], subprocess.Popen[bytes]]:
        """How to launch the JVM on the ports chosen now: its config written, its storage
        formatted on a first start."""
        config = self._write_config(work_dir)
        self._archive = ClassArchive("kafka", java=java, jars=lib.glob("*.jar"))
        if not (work_dir / "data" / "meta.properties").exists():
            kafka_config.format_storage(
                [
                    *kafka_config.jvm_command(java=java, lib=lib, work_dir=work_dir, heap="128m"),
                    *self._archive.options(),
                ],
                work_dir=work_dir,
                config=config,
                extra=self._format_arguments(),
            )
        archive = self._archive

        def launch() -> subprocess.Popen[bytes]:
            archive_options, self._recording = archive.options_recording()
            jvm = kafka_config.jvm_command(java=java, lib=lib, work_dir=work_dir, heap=self._heap)
            return self._launch([*jvm, *archive_options], work_dir=work_dir, config=config)

        return launch

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL) and remove the work dir unless kept. Idempotent."""
        self._terminate(grace=_STOP_GRACE_S)
        if self._work_dir is not None and self._owns_work_dir and not self._keep:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None
        self._ports = None
        self._proxied_port = None

    def kill(self) -> None:
        """Crash the broker (SIGKILL), keeping its ports and data for `start()`/`restart()`."""
        self._terminate(grace=0.0)

    def restart(self, *, timeout: float = 60.0, hard: bool = False) -> None:
        """Stop the JVM (SIGKILL when `hard`), then start it again on the same ports and data."""
        self._terminate(grace=0.0 if hard else _STOP_GRACE_S)
        self.start(timeout=timeout)

    def pause(self) -> None:
        """Freeze the JVM (SIGSTOP): connections stay open, but nothing answers."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Thaw a paused JVM (SIGCONT)."""
        self._signal(signal.SIGCONT)

    @property
    def _owns_work_dir(self) -> bool:
        return self._given_work_dir is None

    def _prepare_work_dir(self) -> Path:
        if self._work_dir is None:
            if self._given_work_dir is not None:
                self._given_work_dir.mkdir(parents=True, exist_ok=True)
                self._work_dir = self._given_work_dir.resolve()
            else:
                self._work_dir = Path(tempfile.mkdtemp(prefix="streamflow-kafka-"))
        return self._work_dir

    def _write_config(self, work_dir: Path) -> Path:
        assert self._ports is not None
        plaintext, controller = self._ports
        settings = {
            **kafka_config.server_settings(
                plaintext=plaintext,
                controller=controller,
                data=work_dir / "data",
                host=self._host,
                proxied=self._proxied(),
            ),
            **self._extra_settings(work_dir),
            **self._overrides,
        }
        config = work_dir / "server.properties"
        config.write_text(
            "".join(f"{key}={kafka_config.escape(value)}\n" for key, value in settings.items())
        )
        return config

    def _proxied(self) -> tuple[int, str] | None:
        """The proxied listener's port and the address it advertises, if there is one."""
        if self._advertised is None or self._proxied_port is None:
            return None
        return self._proxied_port, self._advertised

    def _extra_settings(self, work_dir: Path) -> dict[str, str]:
        """Settings a subclass adds (listeners, security) over the plaintext defaults."""
        return {}

    def _format_arguments(self) -> list[str]:
        """Extra `kafka-storage format` arguments, e.g. SCRAM users that must exist at start."""
        return []

    def _launch(self, jvm: list[str], *, work_dir: Path, config: Path) -> subprocess.Popen[bytes]:
        command = [
            *jvm,
            *self._jvm_options,
            "kafka.Kafka",
            str(config),
        ]
        with (work_dir / "jvm.out").open("ab") as out:
            return subprocess.Popen(
                command,
                cwd=work_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _run_until_ready(
        self, launch: Callable[[], subprocess.Popen[bytes]], *, deadline: float
    ) -> None:
        """Launch the JVM and wait until it is ready; once more when it answers but hands
        out no producer id (:func:`_hands_out_producer_ids`)."""
        for attempt in range(_LAUNCHES):
            self._process = launch()
            _running.add(self)
            self._wait_until_ready(deadline=deadline)
            within = max(0.1, min(_PRODUCER_ID_WAIT_S, deadline - time.monotonic()))
            if _hands_out_producer_ids(self.bootstrap_servers, within=within):
                return
            note = f"no producer id within {within:.0f} s of answering metadata"
            if attempt + 1 == _LAUNCHES or time.monotonic() >= deadline:
                raise DevkitError(f"Kafka started but gave {note}.{self._tails()}")
            self._note(f"streamflow: the broker gave {note}; starting it again")
            self._terminate(grace=0.0)  # its data and ports stay, as after a crash

    def _note(self, line: str) -> None:
        """A line of ours in the JVM's output, where a failure quotes it from."""
        if self._work_dir is not None:
            with (self._work_dir / "jvm.out").open("a") as out:
                out.write(line + "\n")

    def _wait_until_ready(self, *, deadline: float) -> None:
        port = int(self.bootstrap_servers.rpartition(":")[2])
        self._wait_for(deadline, lambda: _port_accepts(self._host, port))
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        self._wait_for(deadline, lambda: _has_broker(admin, deadline=deadline))

    def _wait_for(self, deadline: float, condition: Callable[[], bool]) -> None:
        while not condition():
            if self._process is not None and (code := self._process.poll()) is not None:
                tails = self._tails()
                kind = _PortTaken if _PORT_TAKEN in tails else DevkitError
                raise kind(f"Kafka exited with code {code} while starting.{tails}")
            if time.monotonic() >= deadline:
                raise DevkitError(f"Kafka did not become ready in time.{self._tails()}")
            time.sleep(_POLL_INTERVAL_S)

    def _tails(self) -> str:
        if self._work_dir is None:
            return ""
        parts = [_local.tail(self._work_dir / name) for name in ("jvm.out", "broker.log")]
        text = "\n".join(part for part in parts if part)
        if "UnsupportedClassVersionError" in text:
            text += "\nKafka 4 needs Java 17 or newer; set JAVA_HOME to a newer JDK."
        return f" Work dir: {self._work_dir}\n{text}" if text else f" Work dir: {self._work_dir}"

    def _terminate(self, *, grace: float) -> None:
        process, self._process = self._process, None
        _running.discard(self)
        _local.terminate(process, grace=ClassArchive.stop_grace(grace, self._recording))
        if self._archive is not None and process is not None:
            self._archive.keep(self._recording, process.returncode)
            self._recording = None

    def _signal(self, signum: signal.Signals) -> None:
        if self._process is None or self._process.poll() is not None:
            raise DevkitError("The Kafka broker is not running.")
        os.kill(self._process.pid, signum)


def create_topic(
    *,
    bootstrap_servers: str,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create a topic and wait until every partition has a leader, so it is usable at once."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    settings = dict(config or {})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=settings)
    admin.create_topics([topic], operation_timeout=timeout)[name].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while not _has_leaders(admin, name, partitions=partitions):
        if time.monotonic() >= deadline:
            raise DevkitError(f"Topic {name} still lacks partition leaders after {timeout} s.")
        time.sleep(_POLL_INTERVAL_S)


def _has_leaders(admin: AdminClient, name: str, *, partitions: int) -> bool:
    topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
    if topic is None or topic.error is not None or len(topic.partitions) != partitions:
        return False
    return all(partition.leader >= 0 for partition in topic.partitions.values())


def _port_accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _hands_out_producer_ids(bootstrap: str, *, within: float) -> bool:
    """Whether an idempotent producer is given a producer id within ``within`` seconds.

    The broker asks its controller for a block of ids over the same channel that
    creating the consumer groups' and the transactions' topics takes. A broker whose
    channel is stuck answers metadata but nothing a producer or a group needs (seen
    as librdkafka retrying "Coordinator load in progress" for a minute): that is
    found here, at start, rather than as a stalled test or `streamflow run`. The
    first block is fetched here too, so the first real producer does not wait for it.
    """
    state = {"idempotence": ""}

    def stats(text: str) -> None:
        state["idempotence"] = json.loads(text).get("eos", {}).get("idemp_state", "")

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "statistics.interval.ms": 20,
            "stats_cb": stats,
            "log_level": 0,  # its retries are what is being waited out
        }
    )
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            producer.poll(0.05)
            if state["idempotence"] == "Assigned":
                return True
        return False
    finally:
        producer.flush(0)  # it produced nothing; its handle goes with it


def _has_broker(admin: AdminClient, *, deadline: float) -> bool:
    budget = max(0.5, min(5.0, deadline - time.monotonic()))
    try:
        return bool(admin.list_topics(timeout=budget).brokers)
    except Exception:  # KafkaException while the broker is still coming up
        return False


_running: set[KafkaBroker] = set()


@atexit.register
def _stop_all() -> None:
    """Stop brokers a crashed or careless session left running, so no JVM outlives Python."""
    for broker in list(_running):
        broker.stop()
