"""The ``streamflow`` entry point: one typer app, assembled from command modules.

Commands live in modules of their own (``inspect_cmds`` for verify, graph and
describe; later ones for run, tail, deploy, ...), each with a ``register(app)``
function, so adding a command group touches only :data:`COMMAND_MODULES`.
``main`` is the console script; it turns a :class:`BlueprintError` that a
command let through into the usual problem listing and exit code 1, so a
user's mistake never ends in a traceback.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
from types import ModuleType
from typing import Annotated

import typer

import streamflow
from streamflow.blueprint import BlueprintError
from streamflow.cli import (
    build_cmds,
    deploy_cmds,
    inspect_cmds,
    model_cmds,
    operator_cmds,
    output,
    run_cmds,
    score_cmds,
    streamlet_cmds,
    tail_cmds,
    ui_cmds,
)

__all__ = ["COMMAND_MODULES", "app", "main"]

app = typer.Typer(
    name="streamflow",
    help="Schema-typed streaming ML inference over Apache Kafka.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    add_completion=False,
)

# Each module has register(app). Add new command modules here (run, tail, streamlet, deploy, ...).
COMMAND_MODULES: tuple[ModuleType, ...] = (
    inspect_cmds,
    run_cmds,
    score_cmds,
    streamlet_cmds,
    tail_cmds,
    model_cmds,
    deploy_cmds,
    operator_cmds,
    ui_cmds,
    build_cmds,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"streamflow {streamflow.__version__}")
        raise typer.Exit(output.EXIT_OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Schema-typed streaming ML inference over Apache Kafka.

    Exit codes: 0 success, 1 invalid input, 2 usage error.
    """


for _module in COMMAND_MODULES:
    _module.register(app)


def main() -> None:
    """The console script ``streamflow``.

    ``kill -USR1 <pid>`` makes any streamflow process (a run, a replica, the operator)
    print every thread's Python stack to its stderr and go on: what a hang is waiting on.
    Ctrl-C (SIGINT) stops a command even when it was started as a script's background
    job, which inherits SIGINT ignored: ``streamflow run ... &`` then ``kill -INT``.
    """
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        app()
    except BlueprintError as exc:
        errors = output.error_console()
        output.print_problems(exc.problems, to=errors)
        sys.exit(output.EXIT_INVALID)


if __name__ == "__main__":
    main()
