"""The ``streamflow`` entry point: one typer app, assembled from command modules.

Commands live in modules of their own (``inspect_cmds`` for verify, graph and
describe; ``run_cmds`` for run; ...), each with a ``register(app)`` function.
:data:`COMMANDS` names each module's commands, and a module is imported only
when one of its commands runs (``--help`` imports them all, to list them): a
replica's ``streamflow streamlet run`` or a ``streamflow status`` does not pay
for importing the deploy, build, score and model code, which is most of what a
short command costs. Adding a command touches only :data:`COMMANDS`.
``main`` is the console script; it turns a :class:`BlueprintError` that a
command let through into the usual problem listing and exit code 1, so a
user's mistake never ends in a traceback.
"""

from __future__ import annotations

import faulthandler
import importlib
import signal
import sys
from typing import Annotated, Any

import typer
import typer.core
import typer.main

import streamflow
from streamflow.blueprint import BlueprintError
from streamflow.cli import output

__all__ = ["COMMANDS", "app", "main"]

#: Each command module (under ``streamflow.cli``, with ``register(app)``) and the
#: commands it adds, in the order ``--help`` lists them.
COMMANDS: dict[str, tuple[str, ...]] = {
    "inspect_cmds": ("verify", "graph", "describe"),
    "run_cmds": ("run",),
    "score_cmds": ("score",),
    "streamlet_cmds": ("streamlet",),
    "tail_cmds": ("tail",),
    "model_cmds": ("model",),
    "deploy_cmds": (
        "deploy",
        "undeploy",
        "list",
        "status",
        "scale",
        "configure",
        "configuration",
        "logs",
    ),
    "operator_cmds": ("operator",),
    "ui_cmds": ("ui",),
    "build_cmds": ("build",),
    "devkit_cmds": ("devkit",),
    "init_cmds": ("init",),
}
_MODULE_OF = {name: module for module, names in COMMANDS.items() for name in names}
_SETTINGS: dict[str, Any] = {"rich_markup_mode": "rich", "pretty_exceptions_show_locals": False}


def commands_of(module: str) -> dict[str, Any]:
    """The click commands that ``streamflow.cli.<module>`` registers, by name."""
    registered = typer.Typer(**_SETTINGS)
    registered.callback()(_no_options)  # a group, even of one command
    importlib.import_module(f"streamflow.cli.{module}").register(registered)
    group = typer.main.get_command(registered)
    return dict(group.commands) if isinstance(group, typer.core.TyperGroup) else {}


def _no_options() -> None:
    """A module's commands, gathered."""


class _LazyGroup(typer.core.TyperGroup):
    """The top-level group: a command's module is imported when the command is asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [name for names in COMMANDS.values() for name in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in _MODULE_OF:
            for name, command in commands_of(_MODULE_OF[cmd_name]).items():
                self.add_command(command, name)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in _MODULE_OF:  # a typo: every name, for "Did you mean"
            for name in self.list_commands(ctx):
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="streamflow",
    help="Schema-typed streaming ML inference over Apache Kafka.",
    no_args_is_help=True,
    add_completion=False,
    cls=_LazyGroup,
    **_SETTINGS,
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
