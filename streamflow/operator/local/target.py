"""The local target: ``deploy``, ``scale``, ``status`` and friends against this machine.

Each operation edits the desired spec (``apps/<app>/app.json``) under the CLI
lock and leaves the doing to the daemon, which reconciles with the planner;
reading operations combine the spec, the daemon's ``status.json`` and what
each replica says on its health port. Validation happens before any file is
written (:mod:`streamflow.operator.targets.changes`), so a rejected change leaves
everything as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from streamflow.blueprint.model import Application
from streamflow.operator import targets
from streamflow.operator.local import autoscaler, control, logfiles, pids, private, probe, store
from streamflow.operator.targets import writer_schemas
from streamflow.runtime import kafka_access
from streamflow.runtime.clients import KafkaClients, application_config
from streamflow.runtime.topics import TopicsError, ensure_topics

__all__ = ["LocalTarget"]

_STOP_TIMEOUT_S = 60.0


class LocalTarget:
    kind = "local"

    def __init__(self, *, home: Path) -> None:
        private.tighten(home)  # a home an older version made readable by others
        self.home = store.Home(home)

    # -- changes -----------------------------------------------------------------

    def deploy(self, app: Application, *, bootstrap: str | None) -> targets.Change:
        folder = self.home.app(app.name)
        _refuse_foreground(folder)
        previous = self._spec(folder) if folder.is_local() else None
        with self._lock():
            revived = self._ensure_daemon()
            try:
                address = bootstrap or self._embedded_kafka()
                warnings = [*revived, *_create_topics(app, address)]
                store.write_json(folder.spec, app.to_dict())
                store.write_json(
                    folder.runtime,
                    {
                        "target": "local",
                        "bootstrap": address,
                        "embedded": bootstrap is None,
                        "deployed_at": time.time(),
                    },
                )
            finally:
                if bootstrap is None:
                    control.release_kafka_request(self.home)
        return targets.planned(app, previous, warnings)

    def scale(self, name: str, replicas: Mapping[str, int]) -> targets.Change:
        with self._lock():
            app = self._deployed(name)
            scaled = targets.scaled(app, replicas)
            store.write_json(self.home.app(name).spec, scaled.to_dict())
            revived = self._ensure_daemon()
        counted = [s for s, n in replicas.items() if n > 0]
        warnings = [*revived, *targets.idle_replica_warnings(scaled, counted)]
        return targets.planned(scaled, app, warnings)

    def configure(self, name: str, settings: Mapping[str, Any]) -> targets.Change:
        with self._lock():
            app = self._deployed(name)
            configured = targets.reconfigured(app, settings)
            store.write_json(self.home.app(name).spec, configured.to_dict())
            revived = self._ensure_daemon()
        return targets.planned(configured, app, list(revived))

    def undeploy(self, name: str, *, delete_topics: bool) -> Sequence[str]:
        app = self._deployed(name)
        folder = self.home.app(name)
        runtime = store.read_json(folder.runtime) or {}
        recorded = _replica_pids(folder)
        with self._lock():  # first every replica stops (each commits), the app still known
            digest = store.write_json(folder.spec, _stopped(app).to_dict())
            daemon_up = control.daemon_info(self.home) is not None
        if daemon_up:
            pids.wait_until(lambda: _all_stopped(folder, digest), timeout=_STOP_TIMEOUT_S)
        _stop_processes(recorded, marker=str(folder.applied))
        deleted = _delete_topics(app, str(runtime.get("bootstrap"))) if delete_topics else []
        with self._lock():
            shutil.rmtree(folder.path, ignore_errors=True)
        return deleted

    # -- reading -----------------------------------------------------------------

    def application(self, name: str) -> Application:
        """A deployed application's spec, or that of a foreground ``streamflow run`` (to read)."""
        folder = self.home.app(name)
        readable = folder.is_local() or folder.foreground_owner() is not None
        data = self._spec(folder) if readable else None
        if data is None:
            deployed = [n for n in self.home.app_names() if self.home.app(n).is_local()]
            raise targets.TargetError(
                f"no application {name!r} is deployed on the local target",
                hint=f"deployed: {', '.join(deployed)}"
                if deployed
                else "deploy one with `streamflow deploy BLUEPRINT`",
            )
        return data

    def _deployed(self, name: str) -> Application:
        """The spec of an application the daemon runs: a foreground run is not changed here."""
        _refuse_foreground(
            self.home.app(name),
            hint="a foreground run takes no changes; stop it (Ctrl-C), or deploy it instead",
        )
        return self.application(name)

    def configuration(self, name: str) -> dict[str, dict[str, Any]]:
        return targets.effective_config(self.application(name))

    def kafka_client_config(self, name: str) -> dict[str, Any]:
        """What ``name``'s replicas connect with: kafka.config, STREAMFLOW_KAFKA_*, brokers."""
        app = self.application(name)
        runtime = store.read_json(self.home.app(name).runtime) or {}
        config: dict[str, Any] = application_config(app, os.environ)
        bootstrap = runtime.get("bootstrap") or app.kafka.bootstrap
        if bootstrap:
            config["bootstrap.servers"] = str(bootstrap)
        return config

    def status(self, name: str) -> targets.AppStatus:
        app = self.application(name)
        folder = self.home.app(name)
        recorded = store.read_json(folder.status) or {}
        runtime = store.read_json(folder.runtime) or {}
        up_to_date = recorded.get("spec") == store.digest(store.read_json(folder.spec))
        rows = [r for r in recorded.get("replicas", ()) if r.get("streamlet") in app.streamlets]
        alive = {r["name"]: bool(r.get("running")) and pids.alive(r.get("pid")) for r in rows}
        answers = probe.probe_all(r["health_port"] for r in rows if alive[r["name"]])
        recorded_streamlets = recorded.get("streamlets") or {}
        streamlets = tuple(
            _streamlet_status(
                name=s,
                rows=rows,
                alive=alive,
                probes=answers,
                autoscale=autoscaler.recorded_status(spec, recorded_streamlets.get(s)),
                desired=spec.replicas,
            )
            for s, spec in app.streamlets.items()
        )
        failure = str(recorded.get("error") or "")
        foreground = folder.foreground_owner() is not None  # its own supervisor, not the daemon
        if not failure and not foreground and control.daemon_info(self.home) is None:
            failure = (
                "the local supervisor is not running, so nothing restarts these replicas; "
                "`streamflow deploy` (or scale, configure) starts it again, and it adopts them"
            )
        phase, message = targets.phase_of(streamlets, up_to_date=up_to_date, failure=failure)
        return targets.AppStatus(
            name=name,
            target=self.kind,
            phase=phase,
            message=message,
            up_to_date=up_to_date,
            streamlets=streamlets,
            kafka=runtime.get("bootstrap"),
        )

    def logs(
        self,
        name: str,
        streamlet: str,
        *,
        follow: bool,
        replica: int | None = None,
        tail: int | None = None,
    ) -> Iterator[targets.LogLine]:
        folder = self.home.app(name)
        app = self._spec(folder)  # a foreground `streamflow run` has logs too
        if app is None:
            app = self.application(name)  # raises with the list of deployed apps
        if streamlet not in app.streamlets:
            raise targets.TargetError(
                f"application {name!r} has no streamlet {streamlet!r}",
                hint=f"its streamlets: {', '.join(app.streamlets)}",
            )

        spec = app.streamlets[streamlet]
        most = max(spec.replicas, spec.autoscale.max if spec.autoscale else 0)
        wanted = (
            {f"{streamlet}-{replica}"}
            if replica is not None  # any replica's, even one scaled away
            else {f"{streamlet}-{i}" for i in range(most)}  # autoscaled: any it may run
        )

        def discover() -> dict[str, Path]:
            found = logfiles.replica_logs(folder.logs, streamlet)
            return {k: v for k, v in found.items() if k in wanted}

        files = discover()
        if replica is not None and not files and not follow:
            raise targets.TargetError(
                f"{streamlet}-{replica} has written no log",
                hint=f"{streamlet} has {app.streamlets[streamlet].replicas} replica(s), from 0",
            )
        for replica_name, path in files.items():
            for line in logfiles.last_lines(path, tail):
                yield targets.LogLine(replica_name, line)
        if follow:

            def wait(interval: float) -> bool:
                time.sleep(interval)  # the polling interval of `logs -f`
                return not folder.path.exists()

            for replica_name, line in logfiles.follow(discover, wait=wait):
                yield targets.LogLine(replica_name, line)

    def list(self) -> Sequence[targets.AppStatus]:
        """Deployed applications, and those running in the foreground (``streamflow run``)."""
        return [
            self.status(name)
            for name in self.home.app_names()
            if (self.home.app(name).is_local() or self.home.app(name).foreground_owner())
            and self.home.app(name).spec.exists()
        ]

    # -- internals ---------------------------------------------------------------

    @staticmethod
    def _spec(folder: store.AppDir) -> Application | None:
        data = store.read_json(folder.spec)
        if not isinstance(data, dict):
            return None
        try:
            return Application.from_dict(data)
        except (KeyError, TypeError, ValueError):
            return None

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        try:
            with control.spec_lock(self.home):
                yield
        except control.DaemonError as exc:
            raise targets.TargetError(str(exc)) from None

    def _ensure_daemon(self) -> tuple[str, ...]:
        """Start the daemon if none runs; a warning when it had been stopped under running apps."""
        was_down = control.daemon_info(self.home) is None
        left = [
            name
            for name in self.home.app_names()
            if self.home.app(name).is_local() and _replica_pids(self.home.app(name))
        ]
        try:
            control.ensure_daemon(self.home)
        except control.DaemonError as exc:
            raise targets.TargetError(
                str(exc), hint=f"the daemon's log: {self.home.daemon_log}"
            ) from None
        if not (was_down and left):
            return ()
        return (
            f"the local supervisor was not running (killed?), so nothing watched the replicas "
            f"of {', '.join(sorted(left))}; started it again: it adopts those still running "
            f"and restarts the others (its log: {self.home.daemon_log})",
        )

    def _embedded_kafka(self) -> str:
        try:
            return control.embedded_kafka(self.home)
        except control.DaemonError as exc:
            raise targets.TargetError(
                str(exc), hint="or give Kafka with --bootstrap-servers"
            ) from None


def _refuse_foreground(folder: store.AppDir, *, hint: str = "") -> None:
    owner = folder.foreground_owner()
    if owner is not None:
        raise targets.TargetError(
            f"{folder.name!r} runs in the foreground (`streamflow run`, pid {owner})",
            hint=hint or "stop that run (Ctrl-C) before deploying it",
        )


def _admin(app: Application, bootstrap: str) -> Any:
    # librdkafka's informational lines (log_level 6+) would land raw on the user's terminal
    clients = KafkaClients.for_application(
        app, bootstrap=bootstrap, environ=os.environ, log_level=3
    )
    return clients.admin()


def _create_topics(app: Application, bootstrap: str) -> list[str]:
    clients = KafkaClients.for_application(
        app, bootstrap=bootstrap, environ=os.environ, log_level=3
    )
    try:
        kafka_access.check_access(clients.config)  # a clear cause, not a hang
        return ensure_topics(clients.admin(), app).warnings
    except (TopicsError, kafka_access.KafkaAccessError) as exc:
        raise targets.TargetError(str(exc)) from None
    except KafkaException as exc:
        raise targets.TargetError(
            f"cannot reach Kafka at {bootstrap}: {exc}",
            hint="check --bootstrap-servers, or leave it out to use an embedded broker",
        ) from None


def _delete_topics(app: Application, bootstrap: str) -> list[str]:
    return targets.delete_managed(_admin(app, bootstrap), app, bootstrap=bootstrap)


def _stopped(app: Application) -> Application:
    """``app`` with no replica anywhere, and no autoscaler to start them again."""
    specs = {
        name: dataclasses.replace(spec, replicas=0, autoscale=None)
        for name, spec in app.streamlets.items()
    }
    return dataclasses.replace(app, streamlets=specs)


def _streamlet_status(
    *,
    name: str,
    desired: int,
    rows: list[dict[str, Any]],
    alive: dict[str, bool],
    probes: dict[int, probe.Probe],
    autoscale: targets.AutoscaleStatus | None = None,
) -> targets.StreamletStatus:
    replicas = []
    dead_letters = []  # of writer schemas the replicas cannot read
    for row in (r for r in rows if r["streamlet"] == name):
        running = alive[row["name"]]
        answer = probes.get(row["health_port"], probe.Probe()) if running else probe.Probe()
        dead_letters.append(answer.writer_schemas)
        replicas.append(
            targets.ReplicaStatus(
                name=row["name"],
                streamlet=name,
                index=int(row["index"]),
                running=running,
                ready=answer.ready,
                restarts=int(row.get("restarts", 0)),
                pid=row.get("pid"),
                endpoint=f"http://127.0.0.1:{row['health_port']}",
                reasons=answer.reasons,
                lag=answer.lag,
                model=answer.state.get("model"),
                last_exit=row.get("last_exit"),
                last_exit_reason=str(row.get("last_exit_reason") or ""),
                live=answer.live,
                not_live=answer.not_live or str(row.get("not_live") or ""),
            )
        )
    lags = [r.lag for r in replicas if r.lag is not None]
    models = sorted({r.model for r in replicas if r.model})
    return targets.StreamletStatus(
        name=name,
        desired=autoscale.replicas if autoscale is not None else desired,
        ready=sum(r.ready for r in replicas),
        running=sum(r.running for r in replicas),
        restarts=sum(r.restarts for r in replicas),
        lag=sum(lags) if lags else None,
        model=", ".join(models) or None,
        replicas=tuple(replicas),
        autoscale=autoscale,
        writer_schemas=writer_schemas.summed(dead_letters),
    )


def _replica_pids(folder: store.AppDir) -> list[int]:
    status = store.read_json(folder.status) or {}
    return [r["pid"] for r in status.get("replicas", ()) if isinstance(r.get("pid"), int)]


def _all_stopped(folder: store.AppDir, digest: str) -> bool:
    status = store.read_json(folder.status) or {}
    return status.get("spec") == digest and not any(
        r.get("running") and pids.alive(r.get("pid")) for r in status.get("replicas", ())
    )


def _stop_processes(recorded: list[int], *, marker: str) -> None:
    """SIGTERM the app's replicas that still run (no daemon, or a late one), then SIGKILL."""
    mine = [pid for pid in recorded if _cmdline_has(pid, marker)]
    pids.terminate(mine, grace=30, running=lambda pid: _cmdline_has(pid, marker))


def _cmdline_has(pid: int, marker: str) -> bool:
    """Whether ``pid`` is a live process of this app (any live one where there is no /proc)."""
    found = pids.mentions(pid, marker)
    return pids.alive(pid) if found is None else found
