"""Finding an application from what a user typed: a blueprint file or an app name.

Commands that act on a running application (``tail``, ``model push``,
``model status``) accept either. A name is looked up in the local state that
``streamflow run`` and ``deploy`` write; Kafka's address comes from
``--bootstrap-servers``, the blueprint, or that state, in this order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from streamflow.blueprint import BlueprintError, load_application
from streamflow.blueprint.model import Application
from streamflow.cli import output, state

__all__ = ["resolve"]


def resolve(target: str, explicit_bootstrap: str | None) -> tuple[Application, str]:
    """The application and its Kafka bootstrap servers; exits with a clear error if unknown."""
    path = Path(target)
    runtime: dict[str, Any] = {}
    if path.is_file():
        try:
            app = load_application(path)
        except BlueprintError as exc:
            output.print_problems(exc.problems, to=output.error_console())
            raise typer.Exit(output.EXIT_INVALID) from None
        runtime_file = state.app_dir(app.name) / "runtime.json"
    else:
        spec = state.app_dir(target) / "app.json"
        if not spec.is_file():
            output.fail(
                f"{target!r} is neither a blueprint file nor an application known here",
                hint="pass the blueprint's path, or the name of an app started with run or deploy",
            )
        app = Application.from_dict(state.read_json(spec))
        runtime_file = spec.parent / "runtime.json"
    if runtime_file.is_file():
        runtime = state.read_json(runtime_file)
    bootstrap = explicit_bootstrap or app.kafka.bootstrap or runtime.get("bootstrap")
    if not bootstrap:
        output.fail(f"where is Kafka for {app.name!r}?", hint="pass --bootstrap-servers")
    return app, str(bootstrap)
