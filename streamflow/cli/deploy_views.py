"""How deployed applications look: tables for people, plain data for scripts.

Both targets answer with the same :class:`~streamflow.operator.targets.AppStatus`,
so one set of views serves ``deploy``, ``status``, ``scale``, ``list`` and
``configuration`` on either, and a user sees the same columns everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from streamflow.blueprint.model import Application
from streamflow.cli import output, progress
from streamflow.cli.model_wait import decision_line
from streamflow.operator import targets
from streamflow.operator.kubernetes import spec

__all__ = [
    "autoscale_line",
    "check_portable",
    "print_actions",
    "print_configuration",
    "print_list",
    "print_status",
    "print_warnings",
    "resource_body",
    "summary",
]

_PHASE_STYLE = {
    targets.Phase.RUNNING: "green",
    targets.Phase.PENDING: "yellow",
    targets.Phase.DEGRADED: "bold yellow",
    targets.Phase.FAILED: "red",
}


def print_status(status: targets.AppStatus) -> None:
    console = output.console()
    head = Text.assemble(
        (status.name, "bold"),
        f" on {status.target}: ",
        (status.phase, _PHASE_STYLE.get(status.phase, "")),
    )
    if status.kafka:
        head.append(f"   Kafka: {status.kafka}", style="dim")
    console.print(head)
    table = Table("streamlet", "ready", "restarts", "lag", "model", box=None, pad_edge=False)
    for streamlet in status.streamlets:
        table.add_row(
            *output.plain_cells(
                streamlet.name,
                f"{streamlet.ready}/{streamlet.desired}",
                streamlet.restarts,
                "-" if streamlet.lag is None else streamlet.lag,
                streamlet.model or "-",
            )
        )
    console.print(table)
    for streamlet in status.streamlets:
        if streamlet.autoscale is not None:
            console.print(autoscale_line(streamlet.name, streamlet.autoscale))
    for streamlet in status.streamlets:
        if streamlet.last_decision is not None:
            line = Text.assemble((streamlet.name, "bold"), "  ")
            console.print(line.append_text(decision_line(streamlet.last_decision)), soft_wrap=True)
    for line in writer_schema_lines(status):
        console.print(line, soft_wrap=True)  # one line per writer schema, however long
    for line in replica_lines(status):
        console.print(line)
    if status.message:
        console.print(Text(status.message, style="dim"))


def writer_schema_lines(status: targets.AppStatus) -> list[Text]:
    """``classifier.in  dead letters: 10 from a new writer schema: version 3 of S (id 7): ...``."""
    return [
        Text.assemble(
            (f"{streamlet.name}.{entry.port}", "bold"),
            "  ",
            ("dead letters", "red"),
            f": {entry.describe()}",
        )
        for streamlet in status.streamlets
        for entry in streamlet.writer_schemas
    ]


def replica_lines(status: targets.AppStatus) -> list[Text]:
    """A line for each replica that is not live, and why each restarted replica last stopped."""
    lines = []
    for streamlet in status.streamlets:
        for replica in streamlet.replicas:
            if replica.live is False:
                why = f": {replica.not_live}"
                lines.append(Text.assemble((replica.name, "bold"), "  ", ("not live", "red"), why))
            if replica.restarts and replica.last_exit_reason:
                lines.append(
                    Text(
                        f"{replica.name}  restarted {replica.restarts}x, last: "
                        f"{replica.last_exit_reason}",
                        style="dim",
                    )
                )
    return lines


def autoscale_line(
    name: str, scaling: targets.AutoscaleStatus, *, now: float | None = None
) -> Text:
    """``scorer  autoscale 1..8, target lag 5000: 8 replicas — <why> (last change 12s ago)``."""
    line = Text.assemble(
        (name, "bold"),
        f"  autoscale {scaling.min}..{scaling.max}, target lag {scaling.target_lag}: ",
        (f"{scaling.replicas} replica{'s' if scaling.replicas != 1 else ''}", "bold"),
        f" — {scaling.reason}",
    )
    if scaling.decided_at is not None:
        ago = max(0.0, (time.time() if now is None else now) - scaling.decided_at)
        changes = f", {scaling.decisions} change{'s' if scaling.decisions != 1 else ''} so far"
        line.append(f" (last change {progress.elapsed_text(ago)} ago{changes})", style="dim")
    return line


def print_list(statuses: Sequence[targets.AppStatus]) -> None:
    console = output.console()
    if not statuses:
        console.print("no applications deployed")
        return
    table = Table("app", "target", "phase", "ready", "streamlets", box=None, pad_edge=False)
    for status in statuses:
        ready = sum(s.ready for s in status.streamlets)
        desired = sum(s.desired for s in status.streamlets)
        table.add_row(
            Text(status.name),
            Text(status.target),
            Text(status.phase, style=_PHASE_STYLE.get(status.phase, "")),
            Text(f"{ready}/{desired}"),
            Text(", ".join(f"{s.name} {s.ready}/{s.desired}" for s in status.streamlets)),
        )
    console.print(table)


def summary(status: targets.AppStatus) -> dict[str, Any]:
    """One line of ``list -o json``."""
    return {
        "name": status.name,
        "target": status.target,
        "phase": str(status.phase),
        "message": status.message,
        "ready": sum(s.ready for s in status.streamlets),
        "desired": sum(s.desired for s in status.streamlets),
        "streamlets": {s.name: {"ready": s.ready, "desired": s.desired} for s in status.streamlets},
    }


def print_configuration(config: Mapping[str, Mapping[str, Any]]) -> None:
    table = Table("streamlet", "parameter", "value", box=None, pad_edge=False)
    for streamlet, params in config.items():
        if not params:
            table.add_row(*output.plain_cells(streamlet, "-", "-"))
        for name, value in params.items():
            shown = value if isinstance(value, str) else json.dumps(value)
            table.add_row(*output.plain_cells(streamlet, name, shown))
    output.console().print(table)


def print_actions(verb: str, change: targets.Change, *, target: str) -> None:
    console = output.error_console()
    if not change.actions:
        console.print(Text(f"{change.app.name}: nothing to change on {target}"))
        return
    console.print(Text.assemble((f"{verb} ", "bold"), (change.app.name, "bold"), f" on {target}:"))
    for action in change.actions:
        console.print(Text(f"  {action.describe()}"))


def print_warnings(warnings: Sequence[str]) -> None:
    console = output.error_console()
    for warning in warnings:
        console.print(Text.assemble(("warning", "bold yellow"), ": ", warning))


def check_portable(app: Application) -> None:
    """A Kubernetes deploy names every file inside the project, or says which one is not."""
    try:
        spec.Layout.of(app)
    except spec.PathError as exc:
        output.fail(
            f"{app.name!r} cannot be deployed to Kubernetes: {exc}",
            hint="the image holds the project at /app; keep the blueprint's schemas, Python "
            "paths and files inside the project",
        )


def resource_body(
    app: Application, *, bootstrap: str | None, image: str, namespace: str | None
) -> dict[str, Any]:
    """The StreamflowApplication ``deploy --target kubernetes`` would apply (``--dry-run``)."""
    address = bootstrap or app.kafka.bootstrap or os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP")
    if not address:
        output.fail(
            f"{app.name!r} has no Kafka bootstrap servers for its pods to reach",
            hint="set kafka.bootstrap in the blueprint, or pass --bootstrap-servers",
        )
    if address != app.kafka.bootstrap:
        app = dataclasses.replace(app, kafka=dataclasses.replace(app.kafka, bootstrap=address))
    return spec.body(app, namespace=namespace or "", pods=spec.PodSettings(image=image))
