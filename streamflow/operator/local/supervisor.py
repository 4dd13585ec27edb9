"""The local supervisor: applications as replica processes, kept as the planner says.

One ``LocalSupervisor`` runs any number of applications, each in its own
:class:`~streamflow.operator.local.processes.ProcessGroup`. ``apply(app)``
compares the wanted state (``planner.desired_state``) with what it runs (its
replica processes grouped by streamlet, each tagged with the fingerprint of
the spec it started with) and carries out the planner's actions, so scaling
and reconfiguring are the same operation as deploying, and applying the same
spec twice does nothing. ``tick()`` restarts crashed replicas (with backoff),
applies the autoscaler's counts and writes ``status.json``.

A streamlet with ``autoscale:`` runs as many replicas as its
:class:`~streamflow.operator.local.autoscaler.AppAutoscaler` says, not its
spec's ``replicas``: the autoscaler measures on a thread of its own and the
supervisor scales through the same planner actions as ``streamflow scale``.

The same class serves ``streamflow run`` (in-process, one app, lines echoed to
the terminal) and the daemon behind ``streamflow deploy`` (many apps, spec
files watched). Every replica writes its output to its own log file, which it rotates.

Why the order of things:

* The spec is written to ``applied.json`` *before* any replica starts, since a
  replica reads ``--app-spec`` when it starts; a crashed replica restarted
  later reads the spec that is current then.
* A scale-down stops the highest indexes, so replica numbers stay dense and a
  scale-up later reuses them. Stopping is SIGTERM: the replica finishes its
  batch and commits, and Kafka hands its partitions to the others.
* A roll stops every replica of the streamlet before starting the new ones, so
  two configs never process the same stream at once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamflow.blueprint.model import Application
from streamflow.operator import planner
from streamflow.operator.local import autoscaler, logfiles, pids, processes, store
from streamflow.runtime.clients import KafkaClients

__all__ = ["EventSink", "LocalSupervisor"]

log = logging.getLogger("streamflow.operator.local")

EventSink = Callable[[str, str], None]  # (app, message)
MeasureFactory = Callable[[Application, str], autoscaler.Measure]  # (app, bootstrap) -> measure


@dataclass
class _Running:
    app: Application
    bootstrap: str
    folder: store.AppDir
    group: processes.ProcessGroup
    digest: str = ""
    fingerprints: dict[str, str] = field(default_factory=dict)  # streamlets created, even at 0
    last_status: dict[str, Any] | None = None
    autoscaler: autoscaler.AppAutoscaler | None = None
    # by replica, from a previous supervisor: (restarts, why it last stopped)
    carried: dict[str, tuple[int, str]] = field(default_factory=dict)

    def wanted(self) -> Application:
        """The spec, with the autoscaler's counts for the streamlets it owns."""
        return self.autoscaler.applied_to(self.app) if self.autoscaler else self.app


class LocalSupervisor:
    """Applications as replica processes on this machine. Safe to call from several threads."""

    def __init__(
        self,
        *,
        home: store.Home,
        on_line: processes.LineSink | None = None,
        on_event: EventSink | None = None,  # replicas that exit, and their restarts
        log_format: str = "text",
        stop_timeout: float = 30.0,
        log_max_bytes: int = logfiles.DEFAULT_MAX_BYTES,
        autoscale_interval: float | None = None,  # None: $STREAMFLOW_AUTOSCALE_INTERVAL, else 5 s
        autoscale_measure: MeasureFactory | None = None,  # default: the app's Kafka
    ) -> None:
        self._home = home
        self._on_line = on_line
        self._on_event = on_event or (lambda app, message: log.info("%s: %s", app, message))
        self._log_format = log_format
        self._stop_timeout = stop_timeout
        self._log_max_bytes = log_max_bytes
        self._autoscale_interval = autoscale_interval
        self._autoscale_measure = autoscale_measure or _kafka_measure
        self._apps: dict[str, _Running] = {}
        self._adoptable: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        self._lock = threading.RLock()

    @property
    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._apps)

    def replicas(self, name: str) -> list[processes.ReplicaProcess]:
        """The replica processes of an application, by streamlet and index."""
        with self._lock:
            running = self._apps.get(name)
            found = running.group.snapshot() if running else []
        return sorted(found, key=lambda r: (r.streamlet, r.replica))

    def observed(self, name: str) -> dict[str, planner.StreamletState]:
        with self._lock:
            running = self._apps.get(name)
            return self._observed(running) if running else {}

    # -- changes ---------------------------------------------------------------

    def adopt(self, name: str, recorded: dict[str, Any], alive: list[dict[str, Any]]) -> None:
        """Take over what a previous supervisor of ``name`` left: ``recorded`` is its last
        ``status.json``, ``alive`` the rows of its replicas that still run. At the app's
        first :meth:`apply` they are watched as this supervisor's own (when the spec and
        Kafka are unchanged; else replaced), and every replica's restart count goes on."""
        with self._lock:
            self._adoptable[name] = (recorded, alive)

    def apply(
        self, app: Application, *, bootstrap: str, spec_digest: str | None = None
    ) -> list[planner.Action]:
        """Make what runs match ``app``; the actions it took (none when it already did)."""
        with self._lock:
            running = self._apps.get(app.name)
            if running is not None and running.bootstrap != bootstrap:
                log.info("%s: Kafka is now at %s; restarting every replica", app.name, bootstrap)
                running.group.remove(*running.group.replicas, timeout=self._stop_timeout)
                running.fingerprints.clear()
                self._stop_autoscaler(running)  # it measures the old Kafka
            if running is None:
                running = self._new(app, bootstrap)
                self._apps[app.name] = running
                self._take_over(running, bootstrap)
            running.app, running.bootstrap = app, bootstrap
            running.digest = spec_digest or store.digest(app.to_dict())
            store.write_json(running.folder.applied, app.to_dict())
            self._follow_spec(running)
            actions = self._reconcile(running)
            self._write_status(running)
            return actions

    def remove(self, name: str) -> bool:
        """Stop every replica of an application and forget it; False if it was not running."""
        with self._lock:
            running = self._apps.pop(name, None)
        if running is None:
            return False
        self._stop_autoscaler(running)
        running.group.stop(timeout=self._stop_timeout)
        self._write_status(running)
        log.info("%s: stopped", name)
        return True

    def stop(self) -> None:
        """Stop everything."""
        for name in self.names:
            self.remove(name)

    def tick(self) -> None:
        """Restart replicas that exited, follow the autoscaler, and record the status."""
        with self._lock:
            for running in list(self._apps.values()):
                running.group.supervise_once()
                self._follow_autoscaler(running)
                self._write_status(running)

    # -- internals -------------------------------------------------------------

    def _new(self, app: Application, bootstrap: str) -> _Running:
        folder = self._home.app(app.name)
        group = processes.ProcessGroup(
            on_line=self._on_line,
            on_event=lambda message: self._event(app.name, message),
            log_dir=folder.logs,  # each replica writes its own: it outlives this supervisor
            log_max_bytes=self._log_max_bytes,
        )
        return _Running(app=app, bootstrap=bootstrap, folder=folder, group=group)

    def _event(self, app: str, message: str) -> None:
        self._on_event(app, message)

    def _take_over(self, running: _Running, bootstrap: str) -> None:
        """Adopt the replicas a previous supervisor left running, and carry their counts."""
        recorded, alive = self._adoptable.pop(running.app.name, ({}, []))
        adopted = {str(r["name"]) for r in alive}
        for row in recorded.get("replicas", ()):
            if not isinstance(row, dict) or "name" not in row:
                continue
            restarts, reason = int(row.get("restarts", 0)), str(row.get("last_exit_reason") or "")
            if row.get("running") and row["name"] not in adopted:  # it stops; another starts
                restarts += 1
                reason = "stopped while no supervisor ran, or replaced by this one"
            running.carried[str(row["name"])] = (restarts, reason)
        if not alive:
            return
        if recorded.get("bootstrap") != bootstrap:
            names = ", ".join(f"{r['name']} (pid {r['pid']})" for r in alive)
            self._event(running.app.name, f"replacing {names}: they use another Kafka")
            pids.terminate([int(r["pid"]) for r in alive], grace=self._stop_timeout)
            return
        running.fingerprints = {
            name: str(s.get("fingerprint", ""))
            for name, s in (recorded.get("streamlets") or {}).items()
        }
        for row in alive:
            replica = self._replica(running, row["streamlet"], int(row["index"]))
            replica.health_port = int(row["health_port"])
            replica.command = self._command(
                running, replica.streamlet, replica.replica, replica.health_port
            )
            replica.fingerprint = str(row.get("fingerprint", ""))
            replica.adopted_pid, replica.adopted_marker = (
                int(row["pid"]),
                str(running.folder.applied),
            )
            replica.started_wall = float(row.get("started_at") or 0.0)
            replica.last_exit = row.get("last_exit")
            running.group.add(replica)
        names = ", ".join(f"{r['name']} (pid {r['pid']})" for r in alive)
        self._event(
            running.app.name, f"adopted the replicas a previous supervisor left running: {names}"
        )

    def _reconcile(self, running: _Running) -> list[planner.Action]:
        actions = planner.plan(planner.desired_state(running.wanted()), self._observed(running))
        for action in actions:
            log.info("%s: %s", running.app.name, action.describe())
            self._execute(running, action)
        return actions

    # -- autoscaling -------------------------------------------------------------

    def _follow_spec(self, running: _Running) -> None:
        """Start, update or stop the app's autoscaler for a new spec."""
        autoscaled = any(s.autoscale for s in running.app.streamlets.values())
        if running.autoscaler is not None:
            running.autoscaler.update(running.app)
            if not autoscaled:
                self._stop_autoscaler(running)
        elif autoscaled:
            running.autoscaler = autoscaler.AppAutoscaler(
                running.app,
                measure=self._autoscale_measure(running.app, running.bootstrap),
                interval=self._autoscale_interval,
            )
            running.autoscaler.start()
        self._announce(running)

    def _follow_autoscaler(self, running: _Running) -> None:
        """Scale to the autoscaler's new counts, if it changed any since the last tick."""
        if self._announce(running):
            self._reconcile(running)

    def _announce(self, running: _Running) -> bool:
        """Log the autoscaler's changes as events; whether there were any."""
        changes = running.autoscaler.take_changes() if running.autoscaler else []
        for change in changes:
            self._event(running.app.name, change.describe())
        return bool(changes)

    @staticmethod
    def _stop_autoscaler(running: _Running) -> None:
        if running.autoscaler is not None:
            running.autoscaler.stop()
            running.autoscaler = None

    @staticmethod
    def _observed(running: _Running) -> dict[str, planner.StreamletState]:
        counts: dict[str, int] = {}
        for replica in running.group.snapshot():
            counts[replica.streamlet] = counts.get(replica.streamlet, 0) + 1
        return {
            name: planner.StreamletState(name, counts.get(name, 0), fingerprint)
            for name, fingerprint in running.fingerprints.items()
        }

    def _execute(self, running: _Running, action: planner.Action) -> None:
        if isinstance(action, planner.Create):
            running.fingerprints[action.streamlet] = action.fingerprint
            self._start(running, action.streamlet, range(action.replicas))
        elif isinstance(action, planner.Scale):
            have = self._indexes(running, action.streamlet)
            if action.replicas > len(have):
                missing = [i for i in range(action.replicas) if i not in have]
                self._start(running, action.streamlet, missing[: action.replicas - len(have)])
            else:
                self._stop(running, action.streamlet, have[action.replicas :])
        elif isinstance(action, planner.Roll):
            self._stop(running, action.streamlet, self._indexes(running, action.streamlet))
            running.fingerprints[action.streamlet] = action.fingerprint
            self._start(running, action.streamlet, range(action.replicas))
        else:
            self._stop(running, action.streamlet, self._indexes(running, action.streamlet))
            running.fingerprints.pop(action.streamlet, None)

    @staticmethod
    def _indexes(running: _Running, streamlet: str) -> list[int]:
        return sorted(r.replica for r in running.group.snapshot() if r.streamlet == streamlet)

    def _start(self, running: _Running, streamlet: str, indexes: range | list[int]) -> None:
        for index in indexes:
            replica = self._replica(running, streamlet, index)
            replica.fingerprint = running.fingerprints[streamlet]
            running.group.add(replica)

    def _replica(self, running: _Running, streamlet: str, index: int) -> processes.ReplicaProcess:
        """A replica to start (or adopt), its restart count carried from before."""
        source = Path(running.app.source).parent if running.app.source else None
        port = running.group.free_port()
        restarts, reason = running.carried.pop(f"{streamlet}-{index}", (0, ""))
        return processes.ReplicaProcess(
            streamlet=streamlet,
            replica=index,
            health_port=port,
            cwd=str(source) if source is not None and source.is_dir() else None,
            restarts=restarts,
            last_exit_reason=reason,
            command=self._command(running, streamlet, index, port),
        )

    def _command(self, running: _Running, streamlet: str, index: int, port: int) -> list[str]:
        return processes.replica_command(
            app_spec=running.folder.applied,
            streamlet=streamlet,
            replica=index,
            bootstrap=running.bootstrap,
            health_port=port,
            log_format=self._log_format,
        )

    def _stop(self, running: _Running, streamlet: str, indexes: list[int]) -> None:
        names = [f"{streamlet}-{i}" for i in indexes]
        running.group.remove(*names, timeout=self._stop_timeout)

    def _write_status(self, running: _Running) -> None:
        status = _status(running)
        if status == running.last_status:
            return
        try:
            store.write_json(running.folder.status, status, create_dirs=False)
        except FileNotFoundError:
            return  # the application's folder was removed (undeploy): nothing to record
        running.last_status = status


def _status(running: _Running) -> dict[str, Any]:
    replicas = sorted(running.group.snapshot(), key=lambda r: (r.streamlet, r.replica))
    counts = {name: 0 for name in running.fingerprints}
    for replica in replicas:
        counts[replica.streamlet] = counts.get(replica.streamlet, 0) + 1
    scaling = running.autoscaler.status() if running.autoscaler else {}
    return {
        "app": running.app.name,
        "spec": running.digest,
        "bootstrap": running.bootstrap,
        "supervisor_pid": os.getpid(),
        "streamlets": {
            name: {"replicas": counts[name], "fingerprint": fingerprint}
            | ({"autoscale": scaling[name]} if name in scaling else {})
            for name, fingerprint in sorted(running.fingerprints.items())
        },
        "replicas": [
            {
                "name": r.name,
                "streamlet": r.streamlet,
                "index": r.replica,
                "pid": r.pid,
                "health_port": r.health_port,
                "running": r.running,
                "restarts": r.restarts,
                "started_at": round(r.started_wall, 3),
                "last_exit": r.last_exit,
                "last_exit_reason": r.last_exit_reason,
                "not_live": r.not_live,
                "fingerprint": r.fingerprint,
            }
            for r in replicas
        ],
    }


def _kafka_measure(app: Application, bootstrap: str) -> autoscaler.Measure:
    # librdkafka's informational lines (log_level 6+) would land in the daemon's log
    clients = KafkaClients.for_application(
        app, bootstrap=bootstrap, environ=os.environ, log_level=3
    )
    return autoscaler.kafka_measure(clients.admin())
