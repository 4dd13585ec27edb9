"""``--registry``: which schema registry a command checks against and hands on.

A blueprint whose topics use a registry format is verified against the
registry as the replicas will meet it (each subject's compatibility, schemas
that must already be registered). The registry is, in this order:
``--registry``, ``$STREAMFLOW_SCHEMA_REGISTRY_URL`` (typer reads it for the
option), the blueprint's ``kafka.schema_registry``. The URL chosen on the
command line is written into the application, so its replicas use it too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from streamflow.blueprint import VerifyResult, verify_file
from streamflow.blueprint.model import Application
from streamflow.cli import output
from streamflow.runtime import registry as registries
from streamflow.schema.formats import RegisterPolicy

__all__ = ["RegistryOpt", "connect", "verified", "with_registry"]

RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        envvar=registries.REGISTRY_ENV,
        metavar="URL",
        help="Schema registry (Confluent-compatible API) for topics in a registry format; "
        "their subjects are checked against it.",
    ),
]


def connect(url: str) -> registries.ConfluentRegistry:
    try:
        return registries.ConfluentRegistry(url)
    except registries.RegistryConfigError as exc:  # a bad URL, or the extra is not installed
        output.fail(str(exc))


def verified(
    path: Path,
    *,
    overrides: dict[str, Any] | None,
    registry_url: str | None,
    require_registry: bool = True,
) -> VerifyResult:
    """Verify, with the registry checks when the application has registry topics."""
    registry = connect(registry_url) if registry_url else None
    result = verify_file(
        path, overrides=overrides, registry=registry, require_registry=require_registry
    )
    app = result.application
    if app is None or not app.uses_registry:
        return result
    if registry is None and app.kafka.schema_registry:
        result = verify_file(path, overrides=overrides, registry=connect(app.kafka.schema_registry))
    if result.application is not None and registry_url:
        result = dataclasses.replace(
            result, application=with_registry(result.application, registry_url)
        )
    return result


def with_registry(
    app: Application, url: str, *, register: RegisterPolicy | None = None
) -> Application:
    """The application using the registry at ``url``; ``register``: the default policy,
    unless the blueprint set one."""
    kafka = dataclasses.replace(
        app.kafka, schema_registry=url, register=app.kafka.register or register
    )
    return dataclasses.replace(app, kafka=kafka)
