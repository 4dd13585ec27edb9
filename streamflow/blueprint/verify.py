"""The blueprint verifier: YAML in, an Application or every problem out.

Verification runs in passes over one shared :class:`Reporter`: the document's
fields (``structure``), the streamlets' classes and config
(``verify_streamlets``), the topics' ports (``verify_topics``) and the schemas
(``verify_schemas``). A pass that meets a problem reports it and carries on
with what it could read, so one run shows the user everything that is wrong.
The verifier never raises for bad input; only :func:`load_application`, for
callers that cannot go on without an Application, turns problems into an
exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.blueprint import paths as search_paths
from streamflow.blueprint import (
    verify_autoscale,
    verify_kafka,
    verify_registry,
    verify_schemas,
    verify_streamlets,
    verify_topics,
)
from streamflow.blueprint.model import Application, StreamletSpec, TopicSpec
from streamflow.blueprint.problems import Position, Problem, Severity, has_errors
from streamflow.blueprint.report import Reporter
from streamflow.blueprint.structure import BlueprintDraft, read_blueprint
from streamflow.blueprint.yamlload import Node, parse_yaml
from streamflow.schema.registry import Registry

__all__ = [
    "BlueprintError",
    "VerifyResult",
    "format_problems",
    "load_application",
    "verify_file",
    "verify_text",
]


@dataclass(frozen=True)
class VerifyResult:
    """The Application (None when there are errors) and every problem found.

    ``name`` is the application's name as written, even when it has errors.
    """

    application: Application | None
    problems: list[Problem]
    name: str | None = None

    @property
    def valid(self) -> bool:
        return not has_errors(self.problems)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.WARNING]


class BlueprintError(Exception):
    """A blueprint with errors, for callers that need an Application or nothing."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(format_problems(self.problems))


def format_problems(problems: list[Problem]) -> str:
    """One ``file:line:col: error[code]: message`` line per problem, hints indented below."""
    lines = []
    for problem in problems:
        lines.append(
            f"{problem.position}: {problem.severity.value}[{problem.code}]: {problem.message}"
        )
        if problem.hint:
            lines.append(f"  hint: {problem.hint}")
    return "\n".join(lines)


def verify_file(
    path: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
    require_registry: bool = True,
) -> VerifyResult:
    """Verify the blueprint at ``path``; ``overrides`` maps ``streamlet.param`` to a raw value.

    With a ``registry``, the registry topics' subjects are checked too (and a
    registry counts as configured even if the blueprint names none). Without
    ``require_registry`` (drawing a graph, or a command that will start the
    devkit's registry), registry topics need no registry configured.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problem = Problem(
            "unreadable-file", f"cannot read the blueprint: {reason}", Position(str(path))
        )
        return VerifyResult(None, [problem])
    resolved = file.resolve()
    return _verify(
        text,
        filename=str(path),
        base_dir=resolved.parent,
        source=str(resolved),
        overrides=overrides,
        registry=registry,
        require_registry=require_registry,
    )


def verify_text(
    text: str,
    *,
    filename: str,
    base_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
    require_registry: bool = True,
) -> VerifyResult:
    """Verify blueprint ``text`` as if it were the file ``filename`` in ``base_dir``."""
    base = Path(base_dir).resolve()
    source = str(base / Path(filename).name)
    return _verify(
        text,
        filename=filename,
        base_dir=base,
        source=source,
        overrides=overrides,
        registry=registry,
        require_registry=require_registry,
    )


def load_application(
    path: str | Path, *, overrides: Mapping[str, Any] | None = None
) -> Application:
    """The Application of a valid blueprint; :class:`BlueprintError` lists the problems."""
    result = verify_file(path, overrides=overrides)
    if result.application is None:
        raise BlueprintError(result.problems)
    return result.application


def _verify(
    text: str,
    *,
    filename: str,
    base_dir: Path,
    source: str,
    overrides: Mapping[str, Any] | None,
    registry: Registry | None,
    require_registry: bool,
) -> VerifyResult:
    root, parse_problems = parse_yaml(text, filename=filename)
    report = Reporter(filename)
    report.extend(parse_problems)
    if any(p.code == "invalid-yaml" for p in parse_problems):
        return VerifyResult(None, report.problems)
    draft = read_blueprint(root, report)
    verify_kafka.check_no_secrets(root, report=report)
    if draft is None:
        return VerifyResult(None, report.problems)
    name = draft.name
    python_paths, schema_paths = _search_paths(draft, base_dir=base_dir, report=report)
    descriptors, configs = _check(
        draft,
        python_paths,
        schema_paths,
        overrides or {},
        report,
        registry=registry,
        require_registry=require_registry,
    )
    problems = _sorted(report.problems, first_file=filename)
    if has_errors(problems):
        return VerifyResult(None, problems, name)
    application = _application(
        draft,
        configs=configs,
        descriptors=descriptors,
        schema_paths=schema_paths,
        python_paths=python_paths,
        source=source,
    )
    return VerifyResult(application, problems, name)


def _check(
    draft: BlueprintDraft,
    python_paths: list[Path],
    schema_paths: list[Path],
    overrides: Mapping[str, Any],
    report: Reporter,
    *,
    registry: Registry | None,
    require_registry: bool,
) -> tuple[dict[str, StreamletDescriptor], dict[str, dict[str, Any]]]:
    """Run the passes that need classes and schemas; the descriptors and configs found."""
    streamlets, topics = draft.streamlets, draft.topics
    if not streamlets:
        report.error(
            "empty-application",
            "the application has no streamlets",
            draft.streamlets_key or draft.root,
            hint="add at least one streamlet under streamlets:",
        )
    store = verify_schemas.build_store(schema_paths, report=report)
    descriptors = verify_streamlets.load_descriptors(
        streamlets, python_paths=python_paths, report=report
    )
    wanted = verify_streamlets.read_overrides(overrides, streamlets=streamlets, report=report)
    configs = {
        name: verify_streamlets.check_config(
            streamlets[name], descriptor=descriptor, overrides=wanted, report=report
        )
        for name, descriptor in descriptors.items()
    }
    verify_topics.check_port_uses(
        topics, streamlets=streamlets, descriptors=descriptors, report=report
    )
    verify_topics.check_unconnected(
        streamlets, topics=topics, descriptors=descriptors, report=report
    )
    verify_topics.check_control_topics(topics, descriptors=descriptors, report=report)
    verify_autoscale.check_autoscale(
        streamlets, topics=topics, descriptors=descriptors, report=report
    )
    verify_streamlets.check_replicas(streamlets, descriptors=descriptors, report=report)
    verify_schemas.check_port_schemas(
        streamlets, descriptors=descriptors, store=store, report=report
    )
    verify_schemas.check_compatibility(topics, descriptors=descriptors, store=store, report=report)
    if require_registry:
        verify_registry.check_formats(topics, kafka=draft.kafka, registry=registry, report=report)
    if registry is not None and not has_errors(report.problems):
        verify_registry.check_registry(
            topics,
            kafka=draft.kafka,
            descriptors=descriptors,
            store=store,
            registry=registry,
            report=report,
        )
    for name, descriptor in descriptors.items():
        # a config with a value that did not parse was reported already; checking the
        # rest against the ports would report its defaults' consequences too
        if name in configs and set(streamlets[name].config) <= set(configs[name]):
            verify_streamlets.check_config_against_ports(
                streamlets[name],
                descriptor=descriptor,
                config=configs[name],
                schemas=verify_schemas.port_schemas(descriptor, store=store),
                overrides=wanted,
                report=report,
            )
    return descriptors, configs


def _search_paths(
    draft: BlueprintDraft, *, base_dir: Path, report: Reporter
) -> tuple[list[Path], list[Path]]:
    """Absolute Python and schema search paths: the blueprint's own, then the defaults.

    The blueprint's directory always comes first on the Python path, so
    ``module:Class`` finds a module next to the blueprint.
    """
    python = [base_dir, *_existing(draft.python_paths, base_dir=base_dir, report=report)]
    schemas = _existing(draft.schemas, base_dir=base_dir, report=report)
    schemas += search_paths.project_schema_dirs(start=base_dir)
    return search_paths.unique_paths(python), search_paths.unique_paths(schemas)


def _existing(entries: list[tuple[str, Node]], *, base_dir: Path, report: Reporter) -> list[Path]:
    """Entries resolved against the blueprint's directory; missing ones are problems."""
    out = []
    for text, node in entries:
        path = (base_dir / Path(text).expanduser()).resolve()
        if path.exists():
            out.append(path)
        else:
            report.error(
                "path-not-found",
                f"{text!r} does not exist (resolved to {path})",
                node,
                hint="paths are relative to the blueprint's directory",
            )
    return out


def _sorted(problems: list[Problem], *, first_file: str) -> list[Problem]:
    """The blueprint's own problems first, in reading order, then those in other files."""

    def key(problem: Problem) -> tuple[bool, str, int, int]:
        where = problem.position
        return (where.file != first_file, where.file, where.line, where.column)

    return sorted(problems, key=key)


def _application(
    draft: BlueprintDraft,
    *,
    configs: dict[str, dict[str, Any]],
    descriptors: dict[str, StreamletDescriptor],
    schema_paths: list[Path],
    python_paths: list[Path],
    source: str,
) -> Application:
    streamlets = {
        name: StreamletSpec(
            name=name,
            class_path=s.class_path or "",
            config=configs.get(name, {}),
            replicas=s.replicas,
            guarantee=s.guarantee,
            dlq=s.dlq,
            autoscale=s.autoscale,
            resources=s.resources,
            stall_after=s.stall_after,
            lineage=s.lineage,
            decode_limits=s.decode_limits,
        )
        for name, s in draft.streamlets.items()
    }
    topics = {
        name: TopicSpec(
            name=name,
            producers=tuple(u.ref for u in t.producers),
            consumers=tuple(u.ref for u in t.consumers),
            partitions=t.partitions,
            replication=t.replication,
            config=dict(t.config),
            managed=t.managed,
            format=t.format,
            register=t.register,
        )
        for name, t in draft.topics.items()
    }
    return Application(
        name=draft.name or "",
        streamlets=streamlets,
        topics=topics,
        kafka=draft.kafka,
        schema_paths=tuple(str(p) for p in schema_paths),
        python_paths=tuple(str(p) for p in python_paths),
        source=source,
        _descriptors=dict(descriptors),
    )
