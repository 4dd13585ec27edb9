"""``streamflow ui [APP]``: the live web view of deployed applications, served locally.

The page draws the application's graph and keeps it live (rates, lag,
replicas, models, dead letters, drift, explanations); see
:mod:`streamflow.operator.web`. It only reads: nothing on the page changes
an application. It listens on 127.0.0.1 unless ``--host`` says otherwise,
because what it shows (error messages, keys of dead letters) is the
application's business.
"""

from __future__ import annotations

import os
import webbrowser
from typing import TYPE_CHECKING, Annotated
from urllib.parse import quote

import typer

from streamflow.cli import output
from streamflow.cli.targeting import LOCAL, TargetChoice, with_target
from streamflow.operator import targets

if TYPE_CHECKING:
    from streamflow.operator import web

__all__ = ["register", "ui_access"]


@with_target
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
    where: TargetChoice = LOCAL,
    open_browser: Annotated[
        bool, typer.Option("--open/--no-open", help="Open the page in your web browser.")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.2, max=60.0, help="Seconds between updates of the page.")
    ] = 1.0,
    token_env: Annotated[
        str | None,
        typer.Option(
            help="The environment variable holding a token every request must carry; needed "
            "to listen beyond loopback (a browser opens the printed URL once).",
        ),
    ] = None,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A Host name answered when listening beyond loopback (repeat it; default any).",
        ),
    ] = None,
) -> None:
    """Serve a live web view of an application: its graph, rates, lag, models and drift.

    Read-only. Prints the URL, then serves until Ctrl-C.
    """
    try:
        from streamflow.operator import web
    except ImportError as exc:  # pragma: no cover - starlette and uvicorn are core dependencies
        output.fail(f"the web view needs {exc.name!r}", hint="reinstall streamflow")
    access = ui_access(token_env, allowed_hosts, flag="--token-env")
    try:
        web.check_exposure(host, access)
    except web.UiError as exc:
        output.fail(str(exc))
    chosen = where.open()
    if app is not None:
        _check_app(chosen, app)

    def announce(base: str) -> None:
        url = f"{base}/apps/{quote(app, safe='')}" if app else base
        gate = f"; open {url}?token=${token_env} once" if access.token else ""
        output.error_console().print(
            f"streamflow ui: serving {url} (read-only{gate}; Ctrl-C to stop)",
            markup=False,
            highlight=False,
        )
        typer.echo(url)
        if open_browser:
            webbrowser.open(f"{url}?token={quote(access.token)}" if access.token else url)

    try:
        web.serve(chosen, host=host, port=port, interval=interval, on_ready=announce, access=access)
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


def ui_access(token_env: str | None, hosts: list[str] | None, *, flag: str) -> web.Access:
    """The web view's access from the options: the token read from its variable."""
    from streamflow.operator import web

    token = None
    if token_env is not None:
        token = os.environ.get(token_env, "").strip()
        if not token:
            output.fail(
                f"{flag} {token_env}: the variable is not set or empty",
                hint="set it to a long random string (openssl rand -hex 32), e.g. from a Secret",
            )
    return web.Access(token=token, hosts=tuple(hosts or ()))
