"""Finding an application from what a user typed: a blueprint file or an app name.

Commands that act on a running application (``tail``, ``model push``,
``model status``) accept either. A name is looked up in the local state that
``streamflow run`` and ``deploy`` write; Kafka's address comes from
``--bootstrap-servers``, the blueprint, or that state, in this order.

Their Kafka clients come from :func:`kafka_clients`, which configures them as
the application's replicas are configured (the blueprint's ``kafka.config``
under the ``STREAMFLOW_KAFKA_*`` environment), so a command speaks TLS and
SASL to a broker that wants them rather than plaintext; :func:`kafka_errors`
turns a client that cannot be made or cannot connect into one sentence.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from confluent_kafka import KafkaException

from streamflow.blueprint import verify_file
from streamflow.blueprint.model import Application
from streamflow.cli import output
from streamflow.operator.local import store
from streamflow.runtime import kafka_access
from streamflow.runtime.clients import KafkaClients

__all__ = ["kafka_clients", "kafka_errors", "resolve"]


def resolve(target: str, explicit_bootstrap: str | None) -> tuple[Application, str]:
    """The application and its Kafka bootstrap servers; exits with a clear error if unknown."""
    path = Path(target)
    runtime: dict[str, Any] = {}
    if path.is_file():
        # the registry a running app uses is in its saved spec, not always in the blueprint
        result = verify_file(path, require_registry=False)
        if result.application is None:
            output.print_problems(result.problems, to=output.error_console())
            raise typer.Exit(output.EXIT_INVALID)
        app = result.application
        saved = store.home().app(app.name).spec
        if app.uses_registry and not app.kafka.schema_registry and saved.is_file():
            used = Application.from_dict(store.read_json(saved)).kafka
            kafka = dataclasses.replace(
                app.kafka, schema_registry=used.schema_registry, register=used.register
            )
            app = dataclasses.replace(app, kafka=kafka)
        runtime_file = store.home().app(app.name).runtime
    else:
        spec = store.home().app(target).spec
        if not spec.is_file():
            output.fail(
                f"{target!r} is neither a blueprint file nor an application known here",
                hint="pass the blueprint's path, or the name of an app started with run or deploy",
            )
        app = Application.from_dict(store.read_json(spec))
        runtime_file = store.AppDir(spec.parent).runtime
    if runtime_file.is_file():
        runtime = store.read_json(runtime_file) or {}
    bootstrap = explicit_bootstrap or app.kafka.bootstrap or runtime.get("bootstrap")
    if not bootstrap:
        output.fail(f"where is Kafka for {app.name!r}?", hint="pass --bootstrap-servers")
    return app, str(bootstrap)


def kafka_clients(app: Application, bootstrap: str) -> KafkaClients:
    """Clients configured exactly as the application's replicas configure theirs."""
    # librdkafka's informational lines would interleave with the command's output
    clients = KafkaClients.for_application(
        app, bootstrap=bootstrap, environ=os.environ, log_level=3
    )
    try:  # a wrong password or CA would otherwise be a hang, then a raw librdkafka line
        kafka_access.check_access(clients.config)
    except kafka_access.KafkaAccessError as exc:
        output.fail(str(exc))
    return clients


@contextlib.contextmanager
def kafka_errors(bootstrap: str) -> Iterator[None]:
    """A client that cannot be made (a bad TLS setting) or reach Kafka: exit 1, said plainly."""
    try:
        yield
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        describe = getattr(error, "str", None)
        reason = describe() if callable(describe) else str(error)
        output.fail(
            f"cannot use Kafka at {bootstrap}: {reason}",
            hint="check the blueprint's kafka.config and the STREAMFLOW_KAFKA_* variables",
        )
