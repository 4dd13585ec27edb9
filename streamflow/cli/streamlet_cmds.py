"""``streamflow streamlet run``: the entry point of one replica (local process or pod)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from streamflow.api import descriptor as descriptors
from streamflow.blueprint.model import Application
from streamflow.runtime import clients, logfile, logs, shutdown
from streamflow.runtime.replica import ReplicaOptions, install_signal_handlers, run_replica

__all__ = ["register"]

streamlet_app = typer.Typer(
    help="Run one replica of one streamlet (what a pod runs).", no_args_is_help=True
)


@streamlet_app.command("run")
def run(
    app_spec: Annotated[
        Path,
        typer.Option(
            help="The application spec (JSON), as written by deploy.", exists=True, dir_okay=False
        ),
    ],
    streamlet: Annotated[str, typer.Option(help="Which streamlet of the application to run.")],
    replica: Annotated[int, typer.Option(help="This replica's index.")] = 0,
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(envvar="STREAMFLOW_KAFKA_BOOTSTRAP", help="Kafka bootstrap servers."),
    ] = None,
    health_port: Annotated[
        int, typer.Option(help="Port of /healthz, /readyz and /metrics (0 picks one).")
    ] = 8080,
    health_host: Annotated[
        str, typer.Option(help="Address the health server binds to.")
    ] = "127.0.0.1",
    batch_size: Annotated[int, typer.Option(min=1, help="Records per batch at most.")] = 500,
    flush_timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="On SIGTERM, how many seconds Kafka has to take what the replica holds; it "
            f"ends within this plus {shutdown.CLOSE_MARGIN_S:g}, saying what was not delivered.",
        ),
    ] = shutdown.FLUSH_TIMEOUT_S,
    log_format: Annotated[str, typer.Option(help="text or json.")] = "text",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    log_file: Annotated[
        Path | None,
        typer.Option(
            help="Write stdout and stderr to this file, rotated by the replica itself "
            "(to FILE.1) past --log-max-bytes; default: the terminal.",
            dir_okay=False,
        ),
    ] = None,
    log_max_bytes: Annotated[
        int, typer.Option(min=4096, help="Size at which --log-file is rotated.")
    ] = logfile.DEFAULT_MAX_BYTES,
) -> None:
    """Run one replica until SIGTERM or Ctrl-C; then finish the batch, commit and exit 0."""
    own_log = logfile.OwnLog(log_file, max_bytes=log_max_bytes) if log_file else None
    if own_log is not None:
        own_log.start()
    app = Application.from_dict(json.loads(app_spec.read_text()))
    if streamlet not in app.streamlets:
        typer.echo(
            f"error: application {app.name!r} has no streamlet {streamlet!r} "
            f"(it has: {', '.join(app.streamlets)})",
            err=True,
        )
        raise typer.Exit(1)
    logs.configure_logging(
        fmt=log_format, level=log_level, app=app.name, streamlet=streamlet, replica=replica
    )
    _load_class(app, streamlet)
    bootstrap = bootstrap_servers or app.kafka.bootstrap
    if not bootstrap:
        typer.echo(
            "error: no Kafka bootstrap servers: pass --bootstrap-servers or set "
            "STREAMFLOW_KAFKA_BOOTSTRAP",
            err=True,
        )
        raise typer.Exit(1)
    options = ReplicaOptions(
        bootstrap=bootstrap,
        replica=replica,
        health_port=health_port,
        health_host=health_host,
        batch_size=batch_size,
        kafka_config=clients.config_from_env(os.environ),
        flush_timeout_s=flush_timeout,
    )
    install_signal_handlers(options.stop, flush_timeout_s=flush_timeout)
    try:
        run_replica(app, streamlet, options)
    except Exception as exc:
        logging.getLogger("streamflow.runtime").error(
            "replica failed: %s: %s",
            type(exc).__name__,
            exc,
            exc_info=os.environ.get("STREAMFLOW_DEBUG") == "1",
        )
        raise typer.Exit(1) from None


def _load_class(app: Application, streamlet: str) -> None:
    """Load the streamlet's class before anything starts, or exit 1 saying why.

    The spec was verified where it was deployed, but it is a file here: a class
    it names is still imported only from streamflow and its python_paths.
    """
    try:
        app.descriptor(streamlet)
    except descriptors.ClassLoadError as exc:
        typer.echo(f"error[{exc.code}]: streamlet {streamlet}: {exc.message}", err=True)
        if exc.hint:
            typer.echo(f"  hint: {exc.hint}", err=True)
        raise typer.Exit(1) from None
    except descriptors.DeclarationError as exc:
        typer.echo(f"error[invalid-streamlet]: streamlet {streamlet}: {exc}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.add_typer(streamlet_app, name="streamlet")
