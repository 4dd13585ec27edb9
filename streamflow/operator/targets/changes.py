"""Checking a change before it is applied, and planning what it will do.

What is wrong with a change (an unknown streamlet, a config value of the wrong
type) is found here, from the Application and its streamlets' descriptors,
*before* anything is applied, so every backend rejects the same mistakes with
the same message. :func:`planned` is the one place a backend turns the old and
new spec into the planner's actions that ``deploy``, ``scale`` and
``configure`` report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from streamflow.api import config as config_mod
from streamflow.blueprint.model import Application
from streamflow.operator import planner
from streamflow.operator.targets.protocol import Change, TargetError

__all__ = [
    "data_inputs",
    "effective_config",
    "idle_replica_warnings",
    "planned",
    "reconfigured",
    "scaled",
]


def planned(
    app: Application,
    previous: Application | None,
    warnings: Sequence[str],
    *,
    as_applied: Callable[[Application], Application] = lambda app: app,
) -> Change:
    """The change from ``previous`` (None: a new application) to ``app``, with its actions.

    ``as_applied`` turns a spec into the form the backend stores and plans on
    (the Kubernetes API server gives back ``6`` for ``6.0``), so the actions
    reported are those its reconciler will take.
    """
    before = planner.desired_state(as_applied(previous)) if previous is not None else {}
    actions = planner.plan(planner.desired_state(as_applied(app)), before)
    return Change(app=app, actions=tuple(actions), warnings=tuple(warnings))


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
