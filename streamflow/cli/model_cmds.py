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

from typing import Annotated, Any

import typer
from rich.text import Text

from streamflow.blueprint.model import Application
from streamflow.cli import apps, model_wait, output, registry_opts
from streamflow.cli.model_opts import (
    BootstrapOpt,
    ByReferenceOpt,
    DescriptionOpt,
    Following,
    FormatOpt,
    KerasOpt,
    OnnxOpt,
    ParamOpt,
    ProtocolOpt,
    QuietOpt,
    SavedModelOpt,
    StreamletArg,
    TargetArg,
    TimeoutOpt,
    UrlOpt,
    VersionOpt,
    check_format,
    follow,
    push_errors,
    push_request,
    resolve,
)
from streamflow.operator import model_versions as versions
from streamflow.operator.model_rollouts import Rollouts, decision_topics
from streamflow.runtime.clients import KafkaClients

__all__ = ["register"]

model_app = typer.Typer(
    help="Push models to a running application and see what serves.", no_args_is_help=True
)


@model_app.command("push")
def push(
    target: TargetArg,
    streamlet: StreamletArg,
    saved_model: SavedModelOpt = None,
    keras: KerasOpt = None,
    onnx: OnnxOpt = None,
    url: UrlOpt = None,
    protocol: ProtocolOpt = "v2",
    version: VersionOpt = None,
    name: Annotated[
        str | None, typer.Option(help="The model name (default: the one already served).")
    ] = None,
    param: ParamOpt = None,
    by_reference: ByReferenceOpt = False,
    description: DescriptionOpt = "",
    timeout: TimeoutOpt = 120.0,
    bootstrap_servers: BootstrapOpt = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: FormatOpt = "table",
    quiet: QuietOpt = False,
) -> None:
    """Push a new model version to a serving streamlet and wait until it serves."""
    request = push_request(
        {"keras": keras, "saved_model": saved_model, "onnx": onnx},
        url=url,
        protocol=protocol,
        version=version,
        name=name,
        param=param,
        by_reference=by_reference,
        description=description,
    )
    check_format(fmt)
    app, bootstrap = resolve(target, bootstrap_servers, registry)
    clients = apps.kafka_clients(app, bootstrap)
    with apps.kafka_errors(bootstrap), push_errors():
        channel = versions.ModelChannel(app, clients, streamlet)
        pushed = channel.push(request)
        size = f", {pushed.size:,} bytes" if pushed.size else ""
        said = Text.assemble(
            "pushed ",
            (f"{pushed.model}:{pushed.version}", "bold"),
            f" ({pushed.kind}{size}) to {pushed.topic}",
        )
        follow(said, channel, pushed, Following(app, streamlet, timeout, fmt, quiet))


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
    app, bootstrap = resolve(target, bootstrap_servers, registry)
    with apps.kafka_errors(bootstrap), push_errors():
        clients = apps.kafka_clients(app, bootstrap)
        latest = versions.latest_statuses(app, clients, streamlet)
        if fmt != "table":
            output.print_data(list(latest.values()), fmt=fmt)
            return
        decided = _last_decisions(app, clients, streamlet)
    if not latest:
        output.console().print("no model status yet")
        return
    model_wait.print_status_table(latest)
    for name, decision in decided:
        output.console().print(Text.assemble(f"{name}: ", model_wait.decision_line(decision)))


def _last_decisions(
    app: Application, clients: KafkaClients, streamlet: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """The last rollout decision about the model of each serving streamlet (``streamlet``
    only, if given) that a rollout controller judges."""
    found = []
    for name in [streamlet] if streamlet else app.streamlets:
        try:
            channel = versions.ModelChannel(app, clients, name)
        except versions.ModelPushError:
            continue  # serves no model
        if not decision_topics(app, channel.control.name):
            continue
        rollouts = Rollouts(channel)
        model = rollouts.standing().model
        decisions = rollouts.decisions(model) if model else []
        if decisions:
            found.append((name, decisions[-1]))
    return found


def register(app: typer.Typer) -> None:
    from streamflow.cli import model_rollout_cmds

    model_app.add_typer(model_rollout_cmds.rollout_app, name="rollout")
    app.add_typer(model_app, name="model")
