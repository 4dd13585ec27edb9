"""``verify``, ``graph`` and ``describe``: the commands that inspect without running.

They need neither Kafka nor a cluster: they read a blueprint or a streamlet
class and report on it. All three share the verifier's problems and the
CLI's output helpers, so a mistake reads the same whichever command found it.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from streamflow.api import descriptor as descriptors
from streamflow.blueprint import Severity, VerifyResult, verify_file
from streamflow.blueprint import graph as graphs
from streamflow.blueprint import paths as search_paths
from streamflow.cli import output, registry_opts
from streamflow.cli import overrides as overrides_mod
from streamflow.schema import SchemaStore

__all__ = ["describe", "graph", "register", "verify"]


class VerifyFormat(enum.StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


class GraphFormat(enum.StrEnum):
    text = "text"
    mermaid = "mermaid"
    dot = "dot"


class DescribeFormat(enum.StrEnum):
    json = "json"
    yaml = "yaml"
    table = "table"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``streamflow`` app."""
    app.command()(verify)
    app.command()(graph)
    app.command()(describe)


BlueprintFile = Annotated[
    Path,
    typer.Argument(
        exists=True,
        dir_okay=False,
        readable=True,
        help="The blueprint YAML file (default: blueprint.yaml, as `streamflow init` makes).",
    ),
]
DEFAULT_BLUEPRINT = Path("blueprint.yaml")
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="STREAMLET.PARAM=VALUE",
        help="Override a streamlet's config parameter (repeatable).",
    ),
]


# -- verify ----------------------------------------------------------------


def verify(
    file: BlueprintFile = DEFAULT_BLUEPRINT,
    output_format: Annotated[
        VerifyFormat, typer.Option("--output", "-o", help="Output format.")
    ] = VerifyFormat.text,
    set_: SetOption = None,
    registry: registry_opts.RegistryOpt = None,
) -> None:
    """Check a blueprint and report every problem, with file:line:col.

    Exits 0 when the blueprint is valid (warnings allowed) and 1 when it has errors.

    To read the streamlets' ports and parameters, verify imports the modules the
    blueprint names, which runs their top-level code with your rights: verify only
    blueprints you trust. It imports them only from the streamflow package and the
    blueprint's directory and python_paths; a class anywhere else (the standard
    library, site-packages) is an error, and its module is not imported.
    """
    result = registry_opts.verified(file, overrides=parse_overrides(set_), registry_url=registry)
    if output_format is VerifyFormat.text:
        _print_verify_text(result, file=file)
    else:
        output.print_data(
            {
                "valid": result.valid,
                "application": result.name,
                "problems": [p.to_json() for p in result.problems],
            },
            fmt=output_format.value,
        )
    raise typer.Exit(output.EXIT_OK if result.valid else output.EXIT_INVALID)


def parse_overrides(settings: list[str] | None) -> dict[str, Any]:
    """``--set`` values as ``{"streamlet.param": raw}``; a malformed one is a usage error."""
    try:
        return overrides_mod.collect(settings or [], None)
    except overrides_mod.OverrideError as exc:
        raise typer.BadParameter(str(exc), param_hint="--set") from None


def _print_verify_text(result: VerifyResult, *, file: Path) -> None:
    out = output.console()
    output.print_problems(result.problems, to=out)
    app = result.application
    if app is not None:
        counts = output.problem_counts(result.problems)
        out.print(
            f"✓ {app.name}: {output.plural(len(app.streamlets), 'streamlet')}, "
            f"{output.plural(len(app.topics), 'topic')}, {counts}",
            style="green",
            markup=False,
        )
    else:
        out.print(
            f"✗ {result.name or file}: {output.problem_counts(result.problems)}",
            style="red",
            markup=False,
        )


# -- graph -----------------------------------------------------------------


def graph(
    file: BlueprintFile = DEFAULT_BLUEPRINT,
    output_format: Annotated[
        GraphFormat, typer.Option("--output", "-o", help="text, mermaid or dot (Graphviz).")
    ] = GraphFormat.text,
    set_: SetOption = None,
) -> None:
    """Draw the application: streamlets, topics, and the schema and format on every edge."""
    result = verify_file(file, overrides=parse_overrides(set_), require_registry=False)
    app = result.application
    if app is None:
        errors = output.error_console()
        output.print_problems(result.problems, to=errors)
        errors.print(
            f"✗ {result.name or file}: {output.problem_counts(result.problems)}",
            style="red",
            markup=False,
        )
        raise typer.Exit(output.EXIT_INVALID)
    warnings = [p for p in result.problems if p.severity is Severity.WARNING]
    output.print_problems(warnings, to=output.error_console())
    sys.stdout.write(graphs.render(app, fmt=output_format.value))
    sys.stdout.flush()


# -- describe --------------------------------------------------------------


def describe(
    class_path: Annotated[
        str,
        typer.Argument(
            metavar="MODULE:CLASS", help="The streamlet class, e.g. wine_app:QualityScorer."
        ),
    ],
    output_format: Annotated[
        DescribeFormat, typer.Option("--output", "-o", help="json (default), yaml or table.")
    ] = DescribeFormat.json,
    path: Annotated[
        list[Path] | None,
        typer.Option(
            "--path",
            exists=True,
            file_okay=False,
            help="A directory to import the class from (repeatable); the current one is "
            "included. Classes come only from these and the streamflow package.",
        ),
    ] = None,
    schemas: Annotated[
        list[Path] | None,
        typer.Option(
            "--schemas", exists=True, help="More .avsc files or directories (repeatable)."
        ),
    ] = None,
) -> None:
    """Print a streamlet's descriptor: shape, logic, ports with schemas, and parameters."""
    directories = [Path.cwd(), *(path or [])]
    try:
        cls = descriptors.load_streamlet_class(
            class_path, python_paths=directories, option="--path"
        )
    except descriptors.ClassLoadError as exc:
        output.fail(exc.message, code=exc.code, hint=exc.hint or _import_hint())
    try:
        described = descriptors.describe(cls, class_path=class_path)
    except descriptors.DeclarationError as exc:
        errors = output.error_console()
        for problem in exc.problems:
            errors.print(f"error[invalid-streamlet]: {class_path}: {problem}", markup=False)
        raise typer.Exit(output.EXIT_INVALID) from None
    data = _with_fingerprints(described.to_json(), _schema_store(schemas or []))
    if output_format is DescribeFormat.table:
        _print_descriptor_table(data)
    else:
        output.print_data(data, fmt=output_format.value)


def _import_hint() -> str:
    return "run from the directory that holds the module, or pass --path DIR"


def _schema_store(extra: list[Path]) -> SchemaStore:
    return SchemaStore([*search_paths.project_schema_dirs(start=Path.cwd()), *extra])


def _with_fingerprints(data: dict[str, Any], store: SchemaStore) -> dict[str, Any]:
    """Add each port's schema fingerprint (hex), or null when the schema is not found."""
    for group in ("inlets", "control_inlets", "outlets"):
        for port in data[group]:
            schema = store.find(port["schema"])
            port["fingerprint"] = schema.fingerprint_hex if schema is not None else None
    return data


def _print_descriptor_table(data: dict[str, Any]) -> None:
    out = output.console()
    out.print(
        f"{data['class']}  ({data['shape']}, logic: {data['logic']})", markup=False, style="bold"
    )
    if data["description"]:
        out.print(data["description"], markup=False)
    ports = Table("port", "kind", "schema", "fingerprint", title="Ports", title_justify="left")
    for group in ("inlets", "control_inlets", "outlets"):
        for port in data[group]:
            fingerprint = port["fingerprint"] or "not found"
            ports.add_row(
                *output.plain_cells(port["name"], port["kind"], port["schema"], fingerprint)
            )
    out.print(ports)
    if data["params"]:
        params = Table(
            "param", "type", "default", "description", title="Parameters", title_justify="left"
        )
        for param in data["params"]:
            default = "(required)" if param["required"] else repr(param["default"])
            cells = (param["name"], param["type"], default, param["description"])
            params.add_row(*output.plain_cells(*cells))
        out.print(params)
