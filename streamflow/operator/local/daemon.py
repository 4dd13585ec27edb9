"""The local supervisor daemon: one per ``$STREAMFLOW_HOME``, behind ``streamflow deploy``.

``streamflow deploy`` writes an application's spec under the home and starts
this daemon if none runs (``python -m streamflow.operator.local.daemon``,
detached in a session of its own, its output in ``operator/daemon.log``).
The daemon polls the apps folder and hands each spec to a
:class:`~streamflow.operator.local.supervisor.LocalSupervisor`, so every later
``scale`` or ``configure`` is just a new spec file: the CLI never talks to the
daemon, and the daemon never needs to be up for the CLI to read state.

Lifecycle, and why:

* It holds ``operator/daemon.lock`` for its whole life. The lock dies with the
  process, so "no daemon" is never confused with a stale pid file.
* At start it takes over what a daemon that was killed left behind, found
  through the previous ``status.json`` files: replicas of an application on
  an external Kafka keep running and are *adopted* (watched by pid, probed,
  restarted when they exit); those of an application on the embedded broker
  are stopped, then that broker, since a new broker comes up on new ports.
  Either way each replica's restart count carries on, and the log says what
  was adopted and what replaced. Two replicas of one index never run.
* Replicas write their own log files (rotated), and so does the daemon, so
  nothing is lost when the daemon dies.
* It owns the embedded Kafka broker when an application wants one (no
  bootstrap servers anywhere), with its data in ``$STREAMFLOW_HOME/kafka``, so
  topics survive the daemon; a new daemon's broker comes up on new ports, and
  the replicas are restarted against it.
* With no applications left it exits, stopping that broker. It decides so
  while holding ``operator/cli.lock``, the lock a deploy holds from starting
  the daemon to writing its spec, so an exiting daemon never strands a deploy.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.local import autoscaler, locks, pids, private, store
from streamflow.operator.local.supervisor import LocalSupervisor
from streamflow.runtime import logfile

__all__ = ["Daemon", "main"]

log = logging.getLogger("streamflow.operator.daemon")

POLL_S = 0.5
IDLE_EXIT_S = 3.0
_STOP_GRACE_S = 30.0


class Daemon:
    def __init__(
        self,
        home: store.Home,
        *,
        lock: locks.FileLock,
        poll: float = POLL_S,
        idle_exit: float = IDLE_EXIT_S,
        autoscale_interval: float | None = None,
    ) -> None:
        self.home = home
        self.poll = poll
        self.idle_exit = idle_exit
        self.stopping = threading.Event()
        self.supervisor = LocalSupervisor(home=home, autoscale_interval=autoscale_interval)
        self._lock = lock
        self._broker: devkit.KafkaBroker | None = None
        self._kafka_error = ""
        self._failed_request: float | None = None  # the kafka.wanted mtime that failed
        self._applied: dict[str, str] = {}  # app -> digest of (spec, bootstrap) applied
        self._down = False

    def run(self) -> None:
        self._record()
        _take_over_strays(self.home, self.supervisor)
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():
                if self.reconcile_once():
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= self.idle_exit and self._try_exit():
                    return
                self.stopping.wait(self.poll)
        finally:
            self.shutdown()

    def reconcile_once(self) -> bool:
        """One round over the apps folder; whether anything needs the daemon."""
        apps = self._managed()
        for name in set(self.supervisor.names) - set(apps):
            log.info("%s: undeployed; stopping its replicas", name)
            self.supervisor.remove(name)
            self._applied.pop(name, None)
        wants_kafka = self.home.kafka_wanted.exists()
        if wants_kafka or any(runtime.get("embedded") for runtime in apps.values()):
            self._ensure_broker()
        for name, runtime in apps.items():
            try:
                self._reconcile(name, runtime)
            except Exception as exc:  # one app's failure must not stop the others
                log.exception("%s: cannot apply the spec", name)
                self._record_error(name, f"cannot apply the spec: {type(exc).__name__}: {exc}")
        try:
            self.supervisor.tick()
        except Exception:  # e.g. a restart that cannot spawn: log it, keep supervising
            log.exception("supervision round failed")
        return bool(apps) or wants_kafka

    def shutdown(self) -> None:
        if self._down:
            return
        self._down = True
        self.supervisor.stop()
        if self._broker is not None:
            log.info("stopping the embedded Kafka broker")
            self._broker.stop()
        with contextlib.suppress(FileNotFoundError):
            self.home.daemon_record.unlink()
        self._lock.release()
        log.info("stopped")

    # -- internals -------------------------------------------------------------

    def _managed(self) -> dict[str, dict[str, Any]]:
        """``{app: runtime}`` of every local deployment with a spec."""
        found = {}
        for name in self.home.app_names():
            folder = self.home.app(name)
            runtime = store.read_json(folder.runtime)
            local = isinstance(runtime, dict) and runtime.get("target") == "local"
            if local and folder.spec.exists():
                found[name] = runtime
        return found

    def _reconcile(self, name: str, runtime: dict[str, Any]) -> None:
        folder = self.home.app(name)
        data = store.read_json(folder.spec)
        if data is None:
            return  # removed meanwhile
        bootstrap = self._broker_address() if runtime.get("embedded") else runtime.get("bootstrap")
        if not bootstrap:
            self._record_error(name, self._kafka_error or "no Kafka bootstrap servers recorded")
            return
        key = store.digest({"spec": data, "bootstrap": bootstrap})
        if self._applied.get(name) == key:
            return
        app = Application.from_dict(data)
        self._applied[name] = key  # a failing spec is retried when it changes, not every poll
        self.supervisor.apply(app, bootstrap=str(bootstrap), spec_digest=store.digest(data))
        if runtime.get("embedded") and runtime.get("bootstrap") != bootstrap:
            store.write_json(folder.runtime, {**runtime, "bootstrap": bootstrap}, create_dirs=False)

    def _ensure_broker(self) -> None:
        if self._broker is not None and self._broker.is_running:
            return
        request = _mtime(self.home.kafka_wanted)
        if self._kafka_error and request == self._failed_request:
            return  # a failed start is retried when a deploy asks again
        if self._broker is None:
            self._broker = devkit.KafkaBroker(work_dir=self.home.kafka, keep=True)
        log.info("starting the embedded Kafka broker in %s", self.home.kafka)
        private.ensure_dir(self.home.kafka)
        try:
            with private.private_umask():  # the broker's data and logs, 0600 for its whole life
                self._broker.start(timeout=120)
        except devkit.DevkitError as exc:
            log.error("the embedded Kafka broker did not start: %s", exc)
            self._kafka_error = f"the embedded Kafka broker did not start: {exc}"
            self._failed_request = request
        else:
            self._kafka_error = ""
            log.info("embedded Kafka ready at %s", self._broker.bootstrap_servers)
        self._record()

    def _broker_address(self) -> str | None:
        if self._broker is not None and self._broker.is_running:
            return self._broker.bootstrap_servers
        return None

    def _record(self) -> None:
        store.write_json(
            self.home.daemon_record,
            {
                "pid": os.getpid(),
                "started_at": time.time(),
                "kafka": self._broker_address(),
                "kafka_error": self._kafka_error or None,
            },
        )

    def _record_error(self, name: str, message: str) -> None:
        if name in self.supervisor.names:
            return  # the previous spec keeps running; the daemon log says why
        folder = self.home.app(name)
        data = store.read_json(folder.spec)
        status = {"app": name, "spec": store.digest(data), "error": message, "replicas": []}
        with contextlib.suppress(FileNotFoundError):
            store.write_json(folder.status, status, create_dirs=False)

    def _try_exit(self) -> bool:
        with locks.locked(self.home.cli_lock, timeout=0) as got:
            if not got or self._managed() or self.home.kafka_wanted.exists():
                return False
            log.info("no applications left; exiting")
            self.shutdown()  # under the CLI lock: a deploy waits, then starts a new daemon
            return True


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _take_over_strays(home: store.Home, supervisor: LocalSupervisor) -> None:
    """Adopt, or stop, the replicas a killed daemon left running; then stop its broker.

    Replicas first: each commits on SIGTERM, which needs the broker still up.
    """
    replicas = []
    for name in home.app_names():
        folder = home.app(name)
        status = store.read_json(folder.status)
        if not folder.is_local() or not isinstance(status, dict):
            continue  # a foreground `streamflow run` owns its replicas
        runtime = store.read_json(folder.runtime) or {}
        marker = str(folder.applied)
        alive = [
            row
            for row in status.get("replicas", ())
            if isinstance(row, dict)
            and isinstance(row.get("pid"), int)
            and _cmdline_has(row["pid"], marker)
        ]
        if folder.spec.exists() and not runtime.get("embedded"):
            supervisor.adopt(name, status, alive)
            continue
        supervisor.adopt(name, status, [])  # replaced: only their restart counts go on
        if alive:
            names = ", ".join(f"{r['name']} (pid {r['pid']})" for r in alive)
            why = "its Kafka was the old daemon's" if folder.spec.exists() else "undeployed"
            log.warning("%s: stopping %s to replace them (%s)", name, names, why)
            replicas += [int(r["pid"]) for r in alive]
    brokers = _pids_mentioning(str(home.kafka / "server.properties"))
    for kind, found in (("replica", replicas), ("broker", brokers)):
        if found:
            log.warning("stopping %s process(es) left by a previous daemon: %s", kind, found)
            pids.terminate(found, grace=_STOP_GRACE_S)


def _cmdline_has(pid: int, marker: str) -> bool:
    return pids.mentions(pid, marker) is True  # no /proc: no stray is recognised


def _pids_mentioning(marker: str) -> list[int]:
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    return [
        int(entry.name)
        for entry in proc.iterdir()
        if entry.name.isdigit() and int(entry.name) != os.getpid()
        if _cmdline_has(int(entry.name), marker)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The streamflow local supervisor daemon.")
    parser.add_argument("--home", required=True, type=Path, help="$STREAMFLOW_HOME")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between rounds")
    parser.add_argument(
        "--idle-exit", type=float, default=IDLE_EXIT_S, help="exit this long after the last app"
    )
    parser.add_argument(
        "--autoscale-interval",
        type=float,
        default=autoscaler.default_interval(),
        help=f"seconds between measurements of an autoscaled streamlet's lag "
        f"(default: ${autoscaler.INTERVAL_ENV}, else {autoscaler.INTERVAL_S:g})",
    )
    args = parser.parse_args(argv)
    home = store.Home(args.home.resolve())
    private.ensure_dir(home.operator)
    logfile.OwnLog(home.daemon_log).start()  # rotated; it outlives a CLI that started it
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per liveness probe is noise
    private.tighten(home.root)
    lock = locks.FileLock(home.daemon_lock)
    if not lock.acquire(timeout=0):
        log.info("a daemon already runs for %s", home.root)
        return 0
    daemon = Daemon(
        home,
        lock=lock,
        poll=args.poll,
        idle_exit=args.idle_exit,
        autoscale_interval=args.autoscale_interval,
    )

    def stop(signum: int, frame: object) -> None:
        log.info("received %s; stopping every replica", signal.Signals(signum).name)
        daemon.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log.info("supervising the applications under %s (pid %d)", home.apps, os.getpid())
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
