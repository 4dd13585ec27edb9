"""The verifier's pass over streamlets: their classes and their config.

Each streamlet's class is imported and described; an import failure, a
module outside the python_paths (never imported) or a broken declaration
becomes a problem at the ``class:`` line, never a traceback. Config values
(and ``--set`` overrides, which win) are parsed by the class's own
parameters, so a blueprint is checked with exactly the rules the streamlet
will run with. The result is JSON-able config for the Application model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamflow.api import descriptor as descriptors
from streamflow.api import lifecycle
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.blueprint.problems import Position
from streamflow.blueprint.report import Reporter, did_you_mean
from streamflow.blueprint.structure import StreamletDraft
from streamflow.blueprint.yamlload import Node

__all__ = [
    "Override",
    "check_config",
    "check_config_against_ports",
    "load_descriptors",
    "read_overrides",
]

OVERRIDE_FILE = "<--set>"


@dataclass(frozen=True)
class Override:
    """One ``--set streamlet.param=value``."""

    streamlet: str
    param: str
    raw: Any

    @property
    def position(self) -> Position:
        return Position(OVERRIDE_FILE)

    def __str__(self) -> str:
        return f"--set {self.streamlet}.{self.param}={self.raw}"


def load_descriptors(
    streamlets: Mapping[str, StreamletDraft], *, python_paths: list[Path], report: Reporter
) -> dict[str, StreamletDescriptor]:
    """The descriptor of every streamlet whose class loads and is well declared.

    Classes come from the streamflow package and ``python_paths`` only; a
    module anywhere else is a problem, and is not imported.
    """
    out: dict[str, StreamletDescriptor] = {}
    for draft in streamlets.values():
        if draft.class_path is not None:
            found = _describe(draft, draft.class_path, python_paths, report)
            if found is not None:
                out[draft.name] = found
    return out


def _describe(
    draft: StreamletDraft, class_path: str, python_paths: list[Path], report: Reporter
) -> StreamletDescriptor | None:
    try:
        cls = descriptors.load_streamlet_class(class_path, python_paths=python_paths)
    except descriptors.ClassLoadError as exc:
        report.error(
            exc.code, f"streamlet {draft.name}: {exc.message}", draft.class_node, hint=exc.hint
        )
        return None
    try:
        described = descriptors.describe(cls, class_path=class_path)
    except descriptors.DeclarationError as exc:
        report.error(
            "invalid-streamlet",
            f"streamlet {draft.name}: class {class_path} has broken declarations: "
            + "; ".join(exc.problems),
            draft.class_node,
            hint=f"fix the class; `streamflow describe {class_path}` lists the problems",
        )
        return None
    for problem in lifecycle.check_signatures(cls):
        # at the def itself: the blueprint is right, the class is not
        report.error(
            "invalid-signature",
            f"streamlet {draft.name}: {class_path}.{problem.method} is defined as "
            f"{problem.found}, but the runtime calls {problem.expected} ({problem.reason})",
            Position(problem.file, problem.line, problem.column),
            hint=f"define it as `def {problem.expected}`",
        )
    return described  # its ports and parameters are sound: the rest is checked as usual


def read_overrides(
    overrides: Mapping[str, Any], *, streamlets: Mapping[str, StreamletDraft], report: Reporter
) -> list[Override]:
    """Split ``streamlet.param`` keys, reporting those that name no streamlet."""
    out = []
    where = Position(OVERRIDE_FILE)
    for key, raw in overrides.items():
        streamlet, _, param = key.partition(".")
        if not streamlet or not param:
            report.error(
                "invalid-override",
                f"--set {key}={raw}: expected streamlet.param=value",
                where,
                hint="for example --set scorer.threshold=0.7",
            )
        elif streamlet not in streamlets:
            report.error(
                "unknown-streamlet",
                f"--set {key}={raw}: the blueprint has no streamlet {streamlet!r}",
                where,
                hint=did_you_mean(streamlet, streamlets),
            )
        else:
            out.append(Override(streamlet, param, raw))
    return out


@dataclass(frozen=True)
class _Given:
    raw: Any
    key_at: Position
    value_at: Position
    origin: str


def check_config(
    draft: StreamletDraft,
    *,
    descriptor: StreamletDescriptor,
    overrides: list[Override],
    report: Reporter,
) -> dict[str, Any]:
    """The streamlet's validated config as JSON-able values; problems for the rest."""
    given = {
        name: _Given(value.plain(), report.at(key), report.at(value), f"{draft.name}.{name}")
        for name, (key, value) in draft.config.items()
    }
    for override in overrides:
        if override.streamlet == draft.name:
            given[override.param] = _Given(
                override.raw, override.position, override.position, str(override)
            )
    config: dict[str, Any] = {}
    for name, value in given.items():
        parsed = _parse(name, value, descriptor=descriptor, report=report)
        if parsed is not _INVALID:
            config[name] = parsed
    for param in descriptor.params:
        if param.required and param.name not in given:
            report.error(
                "missing-required-config",
                f"streamlet {draft.name} needs the config parameter {param.name!r} "
                f"({param.type}{': ' + param.description if param.description else ''})",
                draft.key,
                hint=f"add it under config, or pass --set {draft.name}.{param.name}=VALUE",
            )
    return config


_INVALID = object()


def _parse(name: str, given: _Given, *, descriptor: StreamletDescriptor, report: Reporter) -> Any:
    param = descriptor.param(name)
    if param is None:
        names = [p.name for p in descriptor.params]
        known = f"its parameters are: {', '.join(names)}" if names else "it has no parameters"
        report.error(
            "unknown-config-parameter",
            f"{given.origin}: {descriptor.class_path} has no config parameter {name!r}",
            given.key_at,
            hint=did_you_mean(name, names) or known,
        )
        return _INVALID
    try:
        return param.param.to_json(param.param.parse(given.raw))
    except (ValueError, TypeError) as exc:
        report.error(
            "invalid-config-value",
            f"{given.origin}: invalid {param.type}: {exc}",
            given.value_at,
            hint=param.description,
        )
        return _INVALID


def check_config_against_ports(
    draft: StreamletDraft,
    *,
    descriptor: StreamletDescriptor,
    config: Mapping[str, Any],
    schemas: Mapping[str, Mapping[str, Any]],
    overrides: list[Override],
    report: Reporter,
) -> None:
    """The class's own ``check_config`` against its port schemas, each problem located.

    A problem points at the entry inside the value of the parameter it names, at
    ``<--set>`` when that value came from the command line, or at the streamlet
    when it names no parameter. It is an error or a warning, as the class says.
    """
    overridden = {o.param for o in overrides if o.streamlet == draft.name}
    try:
        found = descriptor.cls.check_config(config, schemas=schemas)
    except Exception as exc:
        report.error(
            "invalid-streamlet",
            f"streamlet {draft.name}: {descriptor.class_path}.check_config raised "
            f"{type(exc).__name__}: {exc}",
            draft.class_node,
            hint="a bug in the streamlet class: check_config must return problems, not raise",
        )
        return
    for problem in found:
        given = draft.config.get(problem.param)
        if problem.param in overridden:
            where = Position(OVERRIDE_FILE)
        else:
            where = report.at(_inside(given[1], problem.path) if given else draft.key)
        emit = report.warning if problem.severity == "warning" else report.error
        emit(
            problem.code,
            f"streamlet {draft.name}: {problem.param + ': ' if problem.param else ''}"
            f"{problem.message}",
            where,
            hint=problem.hint,
        )


def _inside(node: Node, path: tuple[str | int, ...]) -> Node:
    """The deepest node along ``path`` (mapping keys, list indexes) that exists."""
    for step in path:
        found = node.get(step) if isinstance(step, str) and node.kind == "map" else None
        if isinstance(step, int) and node.kind == "seq" and 0 <= step < len(node.items):
            found = node.items[step]
        if found is None:
            break
        node = found
    return node


def check_replicas(
    streamlets: Mapping[str, StreamletDraft],
    *,
    descriptors: Mapping[str, StreamletDescriptor],
    report: Reporter,
) -> None:
    """A streamlet asked to run as more replicas than its class can (``max_replicas``)."""
    for name, descriptor in descriptors.items():
        most = descriptor.max_replicas
        draft = streamlets[name]
        if most is None:
            continue
        asked = draft.autoscale.max if draft.autoscale is not None else draft.replicas
        if asked > most:
            node = draft.autoscale_node if draft.autoscale is not None else draft.replicas_node
            report.error(
                "too-many-replicas",
                f"streamlet {name} ({descriptor.class_path}) runs as at most {most} "
                f"replica{'s' if most != 1 else ''}, not {asked}",
                node or draft.key,
                hint=f"set replicas: {most}"
                if draft.autoscale is None
                else f"set autoscale.max: {most}",
            )
