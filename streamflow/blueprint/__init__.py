"""Blueprints: YAML loading with positions, the Application model, the verifier, the graph.

This layer is pure data over :mod:`streamflow.api` and :mod:`streamflow.schema`.
Everything above it (the CLI, the runner, the operator) works from the
:class:`Application` that :func:`verify_file` or :func:`load_application`
produce; nothing else parses blueprint YAML.
"""

from streamflow.blueprint.graph import Graph, build_graph, to_dot, to_mermaid, to_text
from streamflow.blueprint.model import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    GUARANTEES,
    Application,
    KafkaSpec,
    PortRef,
    StreamletSpec,
    TopicSpec,
)
from streamflow.blueprint.paths import find_project_root, project_schema_dir, project_schema_dirs
from streamflow.blueprint.problems import Position, Problem, Severity, has_errors
from streamflow.blueprint.verify import (
    BlueprintError,
    VerifyResult,
    format_problems,
    load_application,
    verify_file,
    verify_text,
)

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "GUARANTEES",
    "Application",
    "BlueprintError",
    "Graph",
    "KafkaSpec",
    "PortRef",
    "Position",
    "Problem",
    "Severity",
    "StreamletSpec",
    "TopicSpec",
    "VerifyResult",
    "build_graph",
    "find_project_root",
    "format_problems",
    "has_errors",
    "load_application",
    "project_schema_dir",
    "project_schema_dirs",
    "to_dot",
    "to_mermaid",
    "to_text",
    "verify_file",
    "verify_text",
]
