"""``streamflow devkit fetch | info``: what the embedded services need, ahead of time and where.

``streamflow run`` fetches the pinned Kafka jars on first use; ``devkit fetch``
does it before (an image's build step, a CI cache warm-up), and ``devkit info``
says what is cached where, which Java would run it, and where the embedded
schema registry would come from, so "why does run download again?" or "why
does it not start?" has an answer without reading code. Both use the devkit
alone: this module only shows what it says.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

import typer

from streamflow import devkit
from streamflow.cli import output
from streamflow.devkit import cache, fetch_progress, kafka_jars

__all__ = ["fetch", "info", "register"]


class InfoFormat(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="devkit",
        help="The embedded services of `streamflow run`: fetch them ahead, see what is cached.",
        no_args_is_help=True,
    )
    group.command()(fetch)
    group.command()(info)
    app.add_typer(group)


def fetch(
    lib_dir: Annotated[
        Path | None,
        typer.Option(
            "--lib-dir",
            file_okay=False,
            help="Fetch into this folder instead of the user's cache (then point "
            "$STREAMFLOW_KAFKA_LIB at it).",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only errors.")] = False,
) -> None:
    """Fetch the pinned Apache Kafka jars of the embedded broker, unless already there.

    They come from Maven Central ($STREAMFLOW_MAVEN_URL: a mirror), each checked
    against its pinned SHA-256; an interrupted fetch resumes. Java is checked first.
    """
    errors = output.error_console()
    try:
        devkit.require_java()
        folder = kafka_jars.fetch(lib_dir, progress=fetch_progress.for_console(errors, quiet=quiet))
    except devkit.DevkitError as exc:
        output.fail(str(exc))
    if not quiet:
        version = kafka_jars.pins().kafka_version
        errors.print(f"Apache Kafka {version} is ready in:", markup=False, highlight=False)
    typer.echo(str(folder))  # stdout: LIB=$(streamflow devkit fetch -q) in a script


def info(
    output_format: Annotated[
        InfoFormat, typer.Option("--output", "-o", help="table (default), json or yaml.")
    ] = InfoFormat.table,
) -> None:
    """Say what the embedded services use: cache, Kafka jars, Java, schema registry."""
    data = _info()
    if output_format is not InfoFormat.table:
        output.print_data(data, fmt=output_format.value)
        return
    kafka, java, registry = data["kafka"], data["java"], data["registry"]
    rows = [
        ("cache", f"{data['cache']} (${cache.CACHE_ENV})"),
        ("kafka", f"Apache Kafka {kafka['version']}, {kafka['jars']} pinned jars"),
        ("  used by run", kafka["used"] or f"none yet: {kafka['problem']}"),
        ("  cached", f"{kafka['cached']} ({kafka['cached_state']})"),
        ("  fetched from", f"{kafka['maven']} (${kafka_jars.MAVEN_ENV})"),
        ("java", f"{java['path']} (Java {java['version']})" if java["ok"] else java["problem"]),
        ("schema registry", registry["app"] or registry["problem"]),
    ]
    out = output.console()
    for label, value in rows:  # plain lines: long paths wrap, never cut
        out.print(f"{label + ':':<17}{value}", markup=False)


def _info() -> dict[str, Any]:
    pins = kafka_jars.pins()
    cached = kafka_jars.cached_lib()
    kafka: dict[str, Any] = {
        "version": pins.kafka_version,
        "jars": len(pins.jars),
        "maven": kafka_jars.maven_url(),
        "cached": str(cached),
        "cached_state": _state(cached),
        "used": None,
        "problem": None,
    }
    try:
        kafka["used"] = str(devkit.find_kafka_lib())
    except devkit.DevkitError as exc:
        kafka["problem"] = str(exc)
    java: dict[str, Any] = {"ok": False, "path": None, "version": None, "problem": None}
    try:
        path = devkit.find_java()
        java.update(path=str(path), version=devkit.java_major(path))
        devkit.require_java()
        java["ok"] = True
    except devkit.DevkitError as exc:
        java["problem"] = str(exc)
    registry: dict[str, Any] = {"app": None, "problem": None}
    try:
        registry["app"] = str(devkit.find_registry_app())
    except devkit.DevkitError as exc:
        registry["problem"] = str(exc)
    return {"cache": str(cache.cache_dir()), "kafka": kafka, "java": java, "registry": registry}


def _state(folder: Path) -> str:
    if kafka_jars.is_complete(folder):
        size = sum(p.stat().st_size for p in folder.glob("*.jar"))
        return f"complete, {size / 1e6:.0f} MB"
    if not folder.is_dir():
        return "not fetched"
    jars = len(list(folder.glob("*.jar")))
    return f"partly fetched: {jars} of {len(kafka_jars.pins().jars)} jars; `devkit fetch` resumes"
