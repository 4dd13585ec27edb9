"""``streamflow ui [APP]``: the live web view of deployed applications, served locally.

The page draws the application's graph and keeps it live (rates, lag,
replicas, models, dead letters, drift, explanations); see
:mod:`streamflow.operator.web`. It only reads: nothing on the page changes
an application. It listens on 127.0.0.1 unless ``--host`` says otherwise,
because what it shows (error messages, keys of dead letters) is the
application's business.
"""

from __future__ import annotations

import webbrowser
from typing import Annotated
from urllib.parse import quote

import typer

from streamflow.cli import output
from streamflow.cli.deploy_cmds import (
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    TargetKind,
    TargetOpt,
    target_for,
)
from streamflow.operator import targets

__all__ = ["register"]


def ui(
    app: Annotated[
        str | None,
        typer.Argument(help="The application to show (default: the list of applications)."),
    ] = None,
    port: Annotated[
        int, typer.Option("--port", "-p", min=0, max=65535, help="The port (0: any free one).")
    ] = 8765,
    host: Annotated[
        str,
        typer.Option(help="The address to listen on; 0.0.0.0 shows it to your whole network."),
    ] = "127.0.0.1",
    target: TargetOpt = TargetKind.local,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    open_browser: Annotated[
        bool, typer.Option("--open/--no-open", help="Open the page in your web browser.")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.2, max=60.0, help="Seconds between updates of the page.")
    ] = 1.0,
) -> None:
    """Serve a live web view of an application: its graph, rates, lag, models and drift.

    Read-only. Prints the URL, then serves until Ctrl-C.
    """
    try:
        from streamflow.operator import web
    except ImportError as exc:  # pragma: no cover - starlette and uvicorn are core dependencies
        output.fail(f"the web view needs {exc.name!r}", hint="reinstall streamflow")
    chosen = target_for(target, kubeconfig, context, namespace)
    if app is not None:
        _check_app(chosen, app)

    def announce(base: str) -> None:
        url = f"{base}/apps/{quote(app, safe='')}" if app else base
        output.error_console().print(
            f"streamflow ui: serving {url} (read-only; Ctrl-C to stop)",
            markup=False,
            highlight=False,
        )
        typer.echo(url)
        if open_browser:
            webbrowser.open(url)

    try:
        web.serve(chosen, host=host, port=port, interval=interval, on_ready=announce)
    except web.UiError as exc:
        output.fail(str(exc))
    except KeyboardInterrupt:
        pass


def _check_app(target: targets.Target, name: str) -> None:
    """An unknown application is an error now, not a 404 in the browser later."""
    try:
        target.application(name)
    except targets.TargetError as exc:
        output.fail(exc.message, hint=exc.hint)


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)
