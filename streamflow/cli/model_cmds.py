"""``streamflow model push`` and ``model status``: models for a running application.

``push`` packs the artifact (a SavedModel directory as a deterministic tar.gz,
a ``.keras`` or an ``.onnx`` file), or names a model-server URL, computes the sha256, and
produces a ``ModelDescriptor`` keyed by model name to the compacted topic
bound to the streamlet's control inlet. Then it follows the streamlet's
status topic until every replica reports ``serving``, ``failed`` or
``rejected`` for that version, or the timeout passes, showing how many serve
it so far (a live line on a terminal, a plain line per change otherwise; with
``-o json|yaml`` stdout carries only the result as data).

The control and status topics are topics of the application like any other,
in whatever format the blueprint gives them: the descriptor is written, and
the statuses read, with the codec their topic's format calls for
(:class:`~streamflow.runtime.codecs.Codecs`), as the streamlet's replicas do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from streamflow.blueprint.model import Application
from streamflow.cli import apps, model_wait, output, registry_opts
from streamflow.models.kinds import PROTOCOLS
from streamflow.operator import backends, targets
from streamflow.operator import model_versions as versions
from streamflow.operator.local import store
from streamflow.schema.registry import RegistryError, RegistryUnavailable

__all__ = ["register"]

model_app = typer.Typer(
    help="Push models to a running application and see what serves.", no_args_is_help=True
)


@model_app.command("push")
def push(
    target: Annotated[str, typer.Argument(help="A blueprint file, or the name of a running app.")],
    streamlet: Annotated[str, typer.Argument(help="The serving streamlet to update.")],
    saved_model: Annotated[
        Path | None,
        typer.Option(help="A TensorFlow SavedModel directory.", exists=True, file_okay=False),
    ] = None,
    keras: Annotated[
        Path | None, typer.Option(help="A Keras 3 .keras file.", exists=True, dir_okay=False)
    ] = None,
    onnx: Annotated[
        Path | None,
        typer.Option(
            help="An ONNX model file (run with onnxruntime).", exists=True, dir_okay=False
        ),
    ] = None,
    url: Annotated[str | None, typer.Option(help="A model server's base URL.")] = None,
    protocol: Annotated[
        str,
        typer.Option(help="The server's protocol: v1 (TF Serving/KServe) or v2 (Open Inference)."),
    ] = "v2",
    version: Annotated[
        int | None, typer.Option(help="The version (default: the newest on the topic + 1).")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The model name (default: the one already served).")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="A descriptor parameter key=value (repeatable)."),
    ] = None,
    by_reference: Annotated[
        bool,
        typer.Option(
            "--by-reference", help="Send a file:// location instead of the artifact bytes."
        ),
    ] = False,
    description: Annotated[str, typer.Option(help="A note stored with the descriptor.")] = "",
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for every replica's status (0: don't wait).")
    ] = 120.0,
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", "-b", envvar="STREAMFLOW_KAFKA_BOOTSTRAP")
    ] = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress while waiting; errors still show.")
    ] = False,
) -> None:
    """Push a new model version to a serving streamlet and wait until it serves."""
    sources = [s for s in (saved_model, keras, onnx, url) if s is not None]
    if len(sources) != 1:
        output.fail(
            "give exactly one of --saved-model, --keras, --onnx or --url",
            exit_code=output.EXIT_USAGE,
        )
    if fmt not in ("table", "json", "yaml"):
        output.fail(f"-o {fmt!r}: use table, json or yaml", exit_code=output.EXIT_USAGE)
    if protocol not in PROTOCOLS:
        output.fail(f"unknown protocol {protocol!r}: use v1 or v2", exit_code=output.EXIT_USAGE)
    artifacts = {"keras": keras, "saved_model": saved_model, "onnx": onnx}
    request = versions.PushRequest(
        artifact=next(((form, path) for form, path in artifacts.items() if path), None),
        url=url,
        protocol=protocol,
        version=version,
        name=name,
        parameters=_params(param or []),
        by_reference=by_reference,
        description=description,
    )
    app, bootstrap = _resolve(target, bootstrap_servers, registry)
    clients = apps.kafka_clients(app, bootstrap)
    with apps.kafka_errors(bootstrap), _push_errors():
        channel = versions.ModelChannel(app, clients, streamlet)
        pushed = channel.push(request)
        size = f", {pushed.size:,} bytes" if pushed.size else ""
        said = Text.assemble(
            "pushed ",
            (f"{pushed.model}:{pushed.version}", "bold"),
            f" ({pushed.kind}{size}) to {pushed.topic}",
        )
        # with -o json|yaml, stdout is the data alone
        (output.console() if fmt == "table" else output.error_console()).print(said)
        awaited = model_wait.Awaited(
            streamlet,
            pushed.model,
            pushed.version,
            timeout,
            machine_output=fmt != "table",
            quiet=quiet,
        )
        waits = timeout > 0 and channel.status is not None  # no status topic: nothing to wait for
        statuses = (
            model_wait.await_status(
                channel,
                pushed,
                awaited,
                replicas=versions.replica_count(_local_target(), app, streamlet),
            )
            if waits
            else {}
        )
        if fmt != "table":
            summary = {"model": pushed.model, "version": pushed.version, "kind": pushed.kind}
            output.print_data({**summary, "topic": pushed.topic, "replicas": statuses}, fmt=fmt)
        elif statuses:
            model_wait.print_status_table(statuses)
        if waits:
            model_wait.check_served(statuses, awaited, app)


def _local_target() -> targets.Target | None:
    """Where ``resolve`` finds applications: the local state (``run`` and ``deploy``)."""
    try:
        return backends.get_target("local", home=store.home().root)
    except targets.TargetError:
        return None


@model_app.command("status")
def status(
    target: Annotated[str, typer.Argument(help="A blueprint file, or the name of a running app.")],
    streamlet: Annotated[str | None, typer.Argument(help="Only this serving streamlet.")] = None,
    fmt: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", "-b", envvar="STREAMFLOW_KAFKA_BOOTSTRAP")
    ] = None,
    registry: registry_opts.RegistryOpt = None,
) -> None:
    """Show the model and version each replica serves, and the latest event of each."""
    app, bootstrap = _resolve(target, bootstrap_servers, registry)
    with apps.kafka_errors(bootstrap), _push_errors():
        latest = versions.latest_statuses(app, apps.kafka_clients(app, bootstrap), streamlet)
    if fmt != "table":
        output.print_data(list(latest.values()), fmt=fmt)
        return
    if not latest:
        output.console().print("no model status yet")
        return
    model_wait.print_status_table(latest)


def _resolve(
    target: str, bootstrap_servers: str | None, registry: str | None
) -> tuple[Application, str]:
    app, bootstrap = apps.resolve(target, bootstrap_servers)
    return (registry_opts.with_registry(app, registry) if registry else app), bootstrap


@contextlib.contextmanager
def _push_errors() -> Iterator[None]:
    """What stops a push, a registry that refuses (a schema not registered) or cannot be
    reached: a sentence."""
    try:
        yield
    except versions.ModelPushError as exc:
        output.fail(str(exc), hint=exc.hint)
    except (RegistryError, RegistryUnavailable) as exc:
        output.fail(str(exc))


def _params(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            output.fail(f"--param {pair!r}: expected key=value", exit_code=output.EXIT_USAGE)
        out[key] = value
    return out


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
