"""Replica processes on this machine: start, watch, restart with backoff, stop.

A replica runs through the same entry point a Kubernetes pod uses
(``streamflow streamlet run``), so what works locally works in a cluster. With
a ``log_dir``, each replica writes its output to ``<log_dir>/<name>.log``, a
file it holds and rotates itself (``--log-file``), so its log outlives this
process; the callback, if any (``streamflow run`` multiplexes every replica's
lines with a coloured prefix), is fed by following those files. Without one,
the output is piped here and read line by line on a thread. A
replica that exits on its own is restarted after a backoff that doubles up
to a ceiling and resets once the replica has stayed up for a while.

A replica that runs but is not *live* (its ``/healthz`` says it is stuck, or it
stopped answering after it once did) is killed and restarted the same way: a
thread asks each replica every ``liveness_every`` seconds, and after
``liveness_failures`` failed answers in a row the next supervision round kills
it. A replica whose loop stalls is thus replaced within its ``stall_after`` plus
``liveness_every`` times ``liveness_failures`` (15 s by default), plus a restart.
Until a replica has answered once, a missing answer is a slow start, not a failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from streamflow.operator.local import logfiles, pids, private, probe

__all__ = ["ProcessGroup", "ReplicaProcess", "free_port", "replica_command"]

log = logging.getLogger("streamflow.operator.local")

LineSink = Callable[["ReplicaProcess", str], None]

_BACKOFF_START = 1.0
_BACKOFF_MAX = 30.0
_STABLE_AFTER = 60.0
LIVENESS_EVERY_S = 5.0
LIVENESS_FAILURES = 3


_RECENT_S = 120.0  # long enough for a replica to start and listen on what it was given
_recent: dict[int, float] = {}  # port -> when this process handed it out (monotonic)
_recent_lock = threading.Lock()


def _kernel_pick() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port(exclude: Collection[int] = ()) -> int:
    """A port nobody on this machine listens on now, not one handed out here lately, and
    not one in ``exclude``.

    Free now, not reserved: the kernel may pick the same port again once its socket is
    closed, before the replica told to use it listens there. So a port is not handed out
    twice within ``_RECENT_S``; a :class:`ProcessGroup` also excludes its replicas' ports
    (:meth:`ProcessGroup.free_port`).
    """
    with _recent_lock:
        now = time.monotonic()
        for port, at in list(_recent.items()):
            if now - at > _RECENT_S:
                del _recent[port]
        for _ in range(100):
            port = _kernel_pick()
            if port not in _recent and port not in exclude:
                _recent[port] = now
                return port
    raise OSError("no free port found for a replica's health server")


def _port_is_free(port: int) -> bool:
    """Whether a replica could listen on ``port`` now (with ``SO_REUSEADDR``, as its
    health server does: a closed connection still in TIME_WAIT does not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def replica_command(
    *,
    app_spec: Path,
    streamlet: str,
    replica: int,
    bootstrap: str,
    health_port: int,
    log_format: str = "text",
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamflow.cli.main",
        "streamlet",
        "run",
        "--app-spec",
        str(app_spec),
        "--streamlet",
        streamlet,
        "--replica",
        str(replica),
        "--bootstrap-servers",
        bootstrap,
        "--health-port",
        str(health_port),
        "--log-format",
        log_format,
    ]


@dataclass
class ReplicaProcess:
    streamlet: str
    replica: int
    command: list[str]
    health_port: int
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None  # the blueprint's directory: relative paths in config resolve there
    fingerprint: str = ""  # the planner's fingerprint of the spec it was started with
    process: subprocess.Popen[str] | None = None
    restarts: int = 0
    started_at: float = 0.0  # monotonic, for the backoff
    started_wall: float = 0.0  # epoch seconds, for people
    next_start: float = 0.0
    backoff: float = _BACKOFF_START
    last_exit: int | None = None
    last_exit_reason: str = ""  # in words: "exited with code 1", "killed: not live (...)"
    # liveness, as the probing thread last heard it (reset at each start)
    live_answered: bool = False  # /healthz answered since this start: silence now counts
    live_failures: int = 0  # failed answers in a row
    not_live: str = ""  # the latest failure's reason
    killed_for: str = ""  # why the supervisor killed it, until it is restarted
    # a replica a previous supervisor started and left running, taken over by this one:
    # not our child, so it is watched by pid and its exit code is never known
    adopted_pid: int | None = None
    adopted_marker: str = ""  # in its command line: a reused pid is not it

    @property
    def name(self) -> str:
        return f"{self.streamlet}-{self.replica}"

    def move_to(self, port: int) -> None:
        """Serve health and metrics on ``port`` from the next start on."""
        at = self.command.index("--health-port") + 1
        self.command[at] = str(port)
        self.health_port = port

    @property
    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self._adopted_alive()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else self.adopted_pid

    def exited(self) -> tuple[bool, int | None]:
        """Whether it has exited, and its exit code when known."""
        if self.process is not None:
            code = self.process.poll()
            return code is not None, code
        if self.adopted_pid is not None:
            return not self._adopted_alive(), None
        return False, None

    def _adopted_alive(self) -> bool:
        if self.adopted_pid is None:
            return False
        mentioned = pids.mentions(self.adopted_pid, self.adopted_marker)
        return pids.alive(self.adopted_pid) if mentioned is None else mentioned

    def signal(self, sig: signal.Signals) -> None:
        if self.process is not None:
            self.process.send_signal(sig)
        elif self.adopted_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.adopted_pid, sig)


class ProcessGroup:
    """The replica processes of one application, kept running until stopped."""

    def __init__(
        self,
        *,
        on_line: LineSink | None = None,
        on_event: Callable[[str], None] | None = None,
        log_dir: Path | None = None,
        log_max_bytes: int = logfiles.DEFAULT_MAX_BYTES,
        liveness_every: float = LIVENESS_EVERY_S,
        liveness_failures: int = LIVENESS_FAILURES,
    ) -> None:
        self.replicas: dict[str, ReplicaProcess] = {}
        self._on_line = on_line
        self.log_dir = log_dir
        self._log_max_bytes = log_max_bytes
        self._followed: dict[str, ReplicaProcess] = {}  # every replica whose file is echoed
        # where echoing each file begins: its end when the replica was added, so lines
        # written before the follower first looks are not taken for old ones
        self._follow_from: dict[str, tuple[int, int]] = {}
        self._follower: threading.Thread | None = None
        self._on_event = on_event or (lambda message: log.info(message))
        self._lock = threading.Lock()
        self._stopping = False
        self.liveness_every = liveness_every
        self.liveness_failures = liveness_failures
        self._prober: threading.Thread | None = None
        self._prober_stop = threading.Event()

    def add(self, replica: ReplicaProcess) -> None:
        """Start ``replica``, or watch it when it is adopted (its ``adopted_pid`` runs)."""
        with self._lock:
            self.replicas[replica.name] = replica
            if self._prober is None:
                self._prober = threading.Thread(
                    target=self._probe_liveness, name="liveness-probe", daemon=True
                )
                self._prober.start()
            if self.log_dir is not None and self._on_line is not None:
                self._followed[replica.name] = replica
                self._follow_from.setdefault(replica.name, _end_of(self.log_file(replica.name)))
                if self._follower is None:
                    self._follower = threading.Thread(
                        target=self._follow, name="log-follower", daemon=True
                    )
                    self._follower.start()
        if replica.adopted_pid is None:
            self._spawn(replica)
        else:
            replica.started_at = time.monotonic()

    def log_file(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir is not None else None

    def remove(self, *names: str, timeout: float = 30.0) -> None:
        """Stop these replicas together (SIGTERM: each finishes its batch and commits)."""
        with self._lock:
            replicas = [r for name in names if (r := self.replicas.pop(name, None)) is not None]
        _terminate(replicas, timeout)

    def snapshot(self) -> list[ReplicaProcess]:
        """The replicas now, for readers on another thread."""
        with self._lock:
            return list(self.replicas.values())

    def free_port(self) -> int:
        """A free port that none of these replicas has been given: two replicas told the
        same port would leave one of them failing to start for good."""
        return free_port(exclude={r.health_port for r in self.snapshot()})

    def _spawn(self, replica: ReplicaProcess) -> None:
        env = {**os.environ, **replica.env, "PYTHONUNBUFFERED": "1"}
        path = self.log_file(replica.name)
        if path is not None:
            # The replica's own file from its first byte (an import error included); it
            # reopens and rotates it itself, so the file outlives this supervisor. Not
            # its parents: the folder of an app removed meanwhile stays removed.
            path.parent.mkdir(mode=private.DIR_MODE, exist_ok=True)
            own = ["--log-file", str(path), "--log-max-bytes", str(self._log_max_bytes)]
            with private.open_private(path, "a") as out:
                replica.process = subprocess.Popen(
                    [*replica.command, *own],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=env,
                    cwd=replica.cwd,
                    start_new_session=True,  # Ctrl-C reaches us first; we stop replicas in order
                )
        else:
            replica.process = subprocess.Popen(
                replica.command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                env=env,
                cwd=replica.cwd,
                start_new_session=True,
            )
        replica.started_at = time.monotonic()
        replica.started_wall = time.time()
        replica.live_answered, replica.live_failures = False, 0
        replica.not_live = replica.killed_for = ""
        if path is None:
            threading.Thread(
                target=self._pump, args=(replica, replica.process), daemon=True
            ).start()

    def _pump(self, replica: ReplicaProcess, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if self._on_line is not None:
                self._on_line(replica, line.rstrip("\n"))

    def _follow(self) -> None:
        """Echo the replicas' files to ``on_line``, until stopped, then what is left."""
        assert self._on_line is not None and self.log_dir is not None
        log_dir = self.log_dir

        def discover() -> dict[str, Path]:
            with self._lock:
                return {name: log_dir / f"{name}.log" for name in self._followed}

        def start_of(name: str) -> tuple[int, int] | None:
            with self._lock:
                return self._follow_from.get(name)

        for name, line in logfiles.follow(discover, wait=self._prober_stop.wait, start_of=start_of):
            replica = self._followed.get(name)
            if replica is not None:
                self._on_line(replica, line)

    def _probe_liveness(self) -> None:
        """Ask every running replica's ``/healthz``, forever; the verdicts go on the replicas."""
        while not self._prober_stop.wait(self.liveness_every):
            for replica in self.snapshot():
                if replica.running and not replica.killed_for:
                    self._probe_one(replica)

    @staticmethod
    def _probe_one(replica: ReplicaProcess) -> None:
        started = replica.started_at
        verdict = probe.liveness(replica.health_port)
        if replica.started_at != started:
            return  # restarted meanwhile: the answer was the old one's
        if verdict.alive:
            replica.live_answered, replica.live_failures, replica.not_live = True, 0, ""
        elif verdict.alive is False or replica.live_answered:
            replica.live_failures += 1
            replica.not_live = verdict.reason

    def supervise_once(self) -> None:
        """Restart replicas that exited, each after its backoff, and kill those not live.
        Call it periodically."""
        now = time.monotonic()
        with self._lock:
            replicas = list(self.replicas.values())
        for replica in replicas:
            if self._stopping or (replica.process is None and replica.adopted_pid is None):
                continue
            exited, code = replica.exited()
            if not exited:
                if now - replica.started_at > _STABLE_AFTER:
                    replica.backoff = _BACKOFF_START
                if replica.live_failures >= self.liveness_failures and not replica.killed_for:
                    self._kill_not_live(replica)
                continue
            if replica.next_start == 0.0:
                replica.last_exit = code
                replica.last_exit_reason = (
                    f"killed: not live ({replica.killed_for})"
                    if replica.killed_for
                    else f"exited with {_describe_exit(code)}"
                    if code is not None
                    else "exited (adopted from a previous supervisor: its exit code is unknown)"
                )
                replica.next_start = now + replica.backoff
                self._on_event(
                    f"{replica.name} {replica.last_exit_reason}; "
                    f"restarting in {replica.backoff:.0f}s"
                )
            elif now >= replica.next_start:
                replica.restarts += 1
                replica.backoff = min(replica.backoff * 2, _BACKOFF_MAX)
                replica.next_start = 0.0
                replica.adopted_pid = None  # ours from now on
                self._free_its_port(replica)
                self._spawn(replica)

    def _free_its_port(self, replica: ReplicaProcess) -> None:
        """Give a replica about to restart a new port when another process holds its own:
        it was free when it was picked, not reserved, and a replica that cannot listen
        exits at once, restart after restart."""
        if _port_is_free(replica.health_port):
            return
        taken = replica.health_port
        replica.move_to(self.free_port())
        self._on_event(
            f"{replica.name}: port {taken} is taken by another process; "
            f"its health and metrics move to port {replica.health_port}"
        )

    def _kill_not_live(self, replica: ReplicaProcess) -> None:
        """SIGKILL: a stuck loop may not finish a batch, and SIGTERM waits for that."""
        replica.killed_for = replica.not_live or "not live"
        self._on_event(
            f"{replica.name} is not live: {replica.killed_for} "
            f"({replica.live_failures} failed probes, {self.liveness_every:g}s apart); killing it"
        )
        replica.signal(signal.SIGKILL)

    def stop(self, *, timeout: float = 30.0) -> None:
        self._stopping = True
        with self._lock:
            replicas = list(self.replicas.values())
        _terminate(replicas, timeout)
        self._prober_stop.set()  # after the replicas' last lines: the follower reads them
        if self._follower is not None:
            self._follower.join(5)


def _terminate(replicas: list[ReplicaProcess], timeout: float) -> None:
    for replica in replicas:
        if replica.running:
            replica.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for replica in replicas:
        if replica.process is None:
            if replica.adopted_pid is not None:  # not our child: its pid is all we have
                pids.terminate([replica.adopted_pid], grace=max(0.1, deadline - time.monotonic()))
            continue
        try:
            replica.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0fs; killing it", replica.name, timeout)
            replica.process.kill()
            replica.process.wait()


def _end_of(path: Path | None) -> tuple[int, int]:
    """A file's inode and size; inode 0 (no file's) while it does not exist, so the file
    that appears is read from its start."""
    try:
        stat = path.stat() if path is not None else None
    except FileNotFoundError:
        stat = None
    return (stat.st_ino, stat.st_size) if stat is not None else (0, 0)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
