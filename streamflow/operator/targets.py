"""Where applications are deployed: the ``Target`` protocol, shared by every backend.

The CLI's ``deploy``, ``status``, ``scale``, ``configure``, ``logs`` and
``undeploy`` speak to a :class:`Target` and never to a backend directly, so
both backends answer with the same words and the same data
(:class:`AppStatus`, :class:`Change`). A backend stores the desired spec its
own way (files under ``$STREAMFLOW_HOME`` for ``local``, a
``StreamflowApplication`` resource for ``kubernetes``) and its reconciler
closes the gap using the same planner.

What is wrong with a change (an unknown streamlet, a config value of the wrong
type) is found here, from the Application and its streamlets' descriptors,
*before* anything is applied, so every backend rejects the same mistakes with
the same message. Backends raise :class:`TargetError` for anything a user can
cause; the CLI prints it and exits 1.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from streamflow.api import config as config_mod
from streamflow.blueprint.model import Application
from streamflow.operator import planner

__all__ = [
    "KINDS",
    "AppStatus",
    "AutoscaleStatus",
    "Change",
    "LogLine",
    "ReplicaStatus",
    "StreamletStatus",
    "Target",
    "TargetError",
    "data_inputs",
    "effective_config",
    "get_target",
    "idle_replica_warnings",
    "phase_of",
    "reconfigured",
    "scaled",
]

KINDS = ("local", "kubernetes")


class TargetError(Exception):
    """A user's request that cannot be carried out; ``problems`` lists each reason."""

    def __init__(self, message: str, *, hint: str = "", problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.problems = tuple(problems)


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    streamlet: str
    index: int
    running: bool
    ready: bool
    restarts: int = 0
    pid: int | None = None  # local target
    pod: str | None = None  # kubernetes target
    endpoint: str | None = None  # the health server's base URL
    reasons: tuple[str, ...] = ()  # why it is not ready
    lag: int | None = None
    model: str | None = None
    last_exit: int | None = None


@dataclass(frozen=True)
class AutoscaleStatus:
    """The autoscaler's bounds and its last decision for one streamlet (``autoscale:``)."""

    min: int
    max: int
    target_lag: int
    replicas: int  # what it last decided
    reason: str  # why, in words: "lag 48210 > 5000 per replica x 2", "stable", ...
    decided_at: float | None = None  # epoch seconds of the last change, None before the first
    lag: int | None = None  # the lag it decided on
    rate: float | None = None  # records/s into the input topics, when known
    decisions: int = 0  # changes of the replica count since the target started applying it


@dataclass(frozen=True)
class StreamletStatus:
    name: str
    desired: int
    ready: int
    running: int
    restarts: int = 0
    lag: int | None = None
    model: str | None = None
    replicas: tuple[ReplicaStatus, ...] = ()
    autoscale: AutoscaleStatus | None = None


@dataclass(frozen=True)
class AppStatus:
    """An application as its target sees it. ``up_to_date``: the latest spec was acted on."""

    name: str
    target: str
    phase: str
    message: str
    up_to_date: bool
    streamlets: tuple[StreamletStatus, ...]
    kafka: str | None = None

    @property
    def settled(self) -> bool:
        """Every streamlet runs its desired replicas, all ready, per the latest spec."""
        return self.up_to_date and all(
            s.ready == s.desired and s.running == s.desired for s in self.streamlets
        )

    def not_ready(self) -> list[str]:
        """``name (reason)`` of each replica that runs but is not ready, or is missing."""
        out = []
        for streamlet in self.streamlets:
            for replica in streamlet.replicas:
                if not replica.ready:
                    reason = "; ".join(replica.reasons) or (
                        "not running" if not replica.running else "not answering"
                    )
                    out.append(f"{replica.name} ({reason})")
            missing = streamlet.desired - len(streamlet.replicas)
            if missing > 0:
                out.append(f"{missing} replica(s) of {streamlet.name} (not started)")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Change:
    """What a deploy, scale or configure asked for: the new spec, the planned actions."""

    app: Application
    actions: tuple[planner.Action, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogLine:
    replica: str
    text: str


class Target(Protocol):
    """A place applications run. Names are application names; errors are TargetError."""

    kind: str

    def deploy(self, app: Application, *, bootstrap: str | None) -> Change: ...

    def undeploy(self, name: str, *, delete_topics: bool) -> Sequence[str]:
        """Stop and remove the application; the topics it deleted (only when asked)."""
        ...

    def status(self, name: str) -> AppStatus: ...

    def application(self, name: str) -> Application:
        """The desired spec, as last deployed, scaled or configured."""
        ...

    def scale(self, name: str, replicas: Mapping[str, int]) -> Change: ...

    def configure(self, name: str, settings: Mapping[str, Any]) -> Change:
        """Apply ``{"streamlet.param": raw value}``; validated first (TargetError)."""
        ...

    def configuration(self, name: str) -> dict[str, dict[str, Any]]: ...

    def kafka_client_config(self, name: str) -> dict[str, Any]:
        """The librdkafka properties a Kafka client of the application is made with.

        Its ``kafka.config`` and credentials as that target hands them to its
        replicas, ``bootstrap.servers`` included when known (local: the
        environment's ``STREAMFLOW_KAFKA_*``; kubernetes: the labelled Secret,
        after the operator's admission checks, TargetError when they refuse).
        """
        ...

    def logs(
        self,
        name: str,
        streamlet: str,
        *,
        follow: bool,
        replica: int | None = None,
        tail: int | None = None,
    ) -> Iterator[LogLine]: ...

    def list(self) -> Sequence[AppStatus]: ...


def get_target(
    kind: str = "local",
    *,
    home: Path | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    image: str | None = None,
) -> Target:
    """The target of that kind; ``home`` is the local target's state dir.

    ``kubeconfig``, ``context``, ``namespace`` and ``image`` are for the
    kubernetes target (None: its defaults).
    """
    if kind == "local":
        from streamflow.operator.local.target import LocalTarget

        root = home or Path(os.environ.get("STREAMFLOW_HOME") or Path.home() / ".streamflow")
        return LocalTarget(home=root.resolve())
    if kind == "kubernetes":
        return _kubernetes(kubeconfig=kubeconfig, context=context, namespace=namespace, image=image)
    raise TargetError(f"unknown target {kind!r}", hint=f"use one of: {', '.join(KINDS)}")


def _kubernetes(**options: str | None) -> Target:
    """The Kubernetes target, from ``streamflow.operator.kubernetes.target`` once it exists.

    That module provides ``KubernetesTarget(*, kubeconfig, context, namespace,
    image)`` implementing :class:`Target`; until then this is a clear error.
    """
    try:
        module = importlib.import_module("streamflow.operator.kubernetes.target")
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.startswith("streamflow."):
            raise TargetError(
                "the kubernetes target is not available yet in this version of streamflow",
                hint="deploy with --target local (the default)",
            ) from None
        if missing.split(".")[0] in ("kopf", "kubernetes"):
            raise TargetError(
                f"the kubernetes target needs the {missing.split('.')[0]!r} package",
                hint="install streamflow with the k8s extra: pip install 'streamflow[k8s]'",
            ) from None
        raise
    return cast(Target, module.KubernetesTarget(**options))


# -- checking a change before it is applied ----------------------------------------------------


def scaled(app: Application, replicas: Mapping[str, int]) -> Application:
    """``app`` with new replica counts; TargetError for unknown streamlets or negative counts.

    An autoscaled streamlet is refused: its autoscaler owns the count (as an
    HPA owns a Deployment's replicas), and would undo a manual one at its
    next look at the lag; its bounds are what a user changes, in the blueprint.
    """
    problems = [_unknown_streamlet(app, name) for name in replicas if name not in app.streamlets]
    problems += [
        f"{name}: the number of replicas must be 0 or more, not {count}"
        for name, count in replicas.items()
        if count < 0
    ]
    autoscaled = [
        (name, bounds)
        for name in replicas
        if name in app.streamlets and (bounds := app.streamlets[name].autoscale) is not None
    ]
    problems += [
        f"{name} is autoscaled between {bounds.min} and {bounds.max} replicas "
        f"(target lag {bounds.target_lag}); change its autoscale: in the blueprint and "
        "deploy it again"
        for name, bounds in autoscaled
    ]
    if problems:
        raise TargetError(
            f"cannot scale {app.name!r}",
            problems=problems,
            hint="autoscaled streamlets follow their input's lag; `streamflow status` shows why"
            if autoscaled
            else "",
        )
    for name, count in replicas.items():
        app = app.with_replicas(name, count)
    return app


def idle_replica_warnings(app: Application, streamlets: Sequence[str]) -> list[str]:
    """Warnings for streamlets with more replicas than partitions to read: the rest sit idle."""
    warnings = []
    for name in streamlets:
        count = app.streamlets[name].replicas
        partitions = _input_partitions(app, name)
        if partitions and count > partitions:
            warnings.append(
                f"{name} has {count} replicas but its input has {partitions} partition(s): "
                f"{count - partitions} replica(s) will sit idle; add partitions to the input "
                "topic to use them"
            )
    return warnings


def _input_partitions(app: Application, streamlet: str) -> int:
    """The most partitions among the streamlet's data inlets (control inlets are broadcast)."""
    return max((app.topics[name].partitions for name in data_inputs(app, streamlet)), default=0)


def data_inputs(app: Application, streamlet: str) -> list[str]:
    """The topics the streamlet reads through its data inlets: what its consumer group owns.

    Control inlets are left out: every replica reads all of a control topic,
    outside the group, so their topics say nothing of the streamlet's backlog
    or of how many replicas can share the work. When the class cannot be
    loaded here, the compacted topics it reads are taken for control topics,
    as they nearly always are. Both targets' autoscalers measure these.
    """
    try:
        inlets: set[str] | None = {p.name for p in app.descriptor(streamlet).inlets}
    except Exception:  # an unimportable class: its status reports it elsewhere
        inlets = None
    return sorted(
        name
        for name, topic in app.topics.items()
        if any(
            ref.streamlet == streamlet
            and (ref.port in inlets if inlets is not None else not topic.compacted)
            for ref in topic.consumers
        )
    )


def reconfigured(app: Application, settings: Mapping[str, Any]) -> Application:
    """``app`` with ``{"streamlet.param": raw}`` applied, each value checked by its parameter."""
    problems: list[str] = []
    changes: dict[str, dict[str, Any]] = {}
    for key, raw in settings.items():
        streamlet, _, param = key.partition(".")
        if not streamlet or not param:
            problems.append(f"{key}={raw}: expected streamlet.param=value")
            continue
        if streamlet not in app.streamlets:
            problems.append(f"{key}={raw}: " + _unknown_streamlet(app, streamlet))
            continue
        value = _checked_value(app, streamlet, param, raw, problems)
        if value is not _INVALID:
            changes.setdefault(streamlet, {})[param] = value
    if problems:
        raise TargetError(
            f"invalid configuration for {app.name!r}; nothing was changed", problems=problems
        )
    for streamlet, config in changes.items():
        app = app.with_config(streamlet, config)
    return app


_INVALID = object()


def _checked_value(
    app: Application, streamlet: str, param: str, raw: Any, problems: list[str]
) -> Any:
    descriptor = app.descriptor(streamlet)
    found = descriptor.param(param)
    if found is None:
        known = ", ".join(p.name for p in descriptor.params) or "none"
        problems.append(
            f"{streamlet}.{param}={raw}: {descriptor.class_path} has no config parameter "
            f"{param!r} (its parameters: {known})"
        )
        return _INVALID
    try:
        return found.param.to_json(found.param.parse(raw))
    except (ValueError, TypeError) as exc:
        problems.append(f"{streamlet}.{param}={raw}: invalid {found.type}: {exc}")
        return _INVALID


def effective_config(app: Application) -> dict[str, dict[str, Any]]:
    """Every streamlet's config with defaults filled in, as plain (JSON) values."""
    out: dict[str, dict[str, Any]] = {}
    for name, spec in app.streamlets.items():
        descriptor = app.descriptor(name)
        try:
            values = config_mod.parse_config(descriptor, spec.config)
        except config_mod.ConfigError:
            out[name] = dict(spec.config)
            continue
        out[name] = {p.name: p.param.to_json(values[p.name]) for p in descriptor.params}
    return out


def _unknown_streamlet(app: Application, name: str) -> str:
    return (
        f"application {app.name!r} has no streamlet {name!r} "
        f"(its streamlets: {', '.join(app.streamlets)})"
    )


# -- phase ---------------------------------------------------------------------------------------


def phase_of(
    streamlets: Sequence[StreamletStatus], *, up_to_date: bool, failure: str = ""
) -> tuple[str, str]:
    """``(phase, message)``: Failed, Running, Degraded (replicas down) or Pending (starting)."""
    if failure:
        return "Failed", failure
    if up_to_date and all(s.ready == s.desired == s.running for s in streamlets):
        return "Running", ""
    down = [
        r.name
        for s in streamlets
        for r in s.replicas
        if not r.running or (not r.ready and r.last_exit is not None)
    ]
    if down:
        return "Degraded", f"not running or restarting: {', '.join(down)}"
    waiting = [f"{s.name} {s.ready}/{s.desired}" for s in streamlets if s.ready != s.desired]
    if not up_to_date:
        return "Pending", "the latest change is being applied"
    return "Pending", f"waiting for replicas to become ready: {', '.join(waiting)}"
