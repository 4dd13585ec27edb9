"""``streamflow model rollout backtest``: recorded input through both versions, offline.

See :mod:`streamflow.score.backtest`: a range of the serving streamlet's input topic is
served with the stable version and with a candidate, through the streamlet's own logic,
in memory; each version's outputs and a comparison are written to a folder.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from streamflow.cli import apps, output, progress, registry_opts
from streamflow.cli.model_opts import (
    BootstrapOpt,
    FormatOpt,
    KerasOpt,
    OnnxOpt,
    ParamOpt,
    ProtocolOpt,
    SavedModelOpt,
    StreamletArg,
    TargetArg,
    UrlOpt,
    check_format,
    push_errors,
    push_request,
    resolve,
)
from streamflow.operator import model_versions as versions
from streamflow.operator.model_rollouts import Rollouts
from streamflow.score import backtest as backtests

__all__ = ["backtest"]

ModelOpt = Annotated[str | None, typer.Option(help="The model (default: the one served).")]


def backtest(
    target: TargetArg,
    streamlet: StreamletArg,
    saved_model: SavedModelOpt = None,
    keras: KerasOpt = None,
    onnx: OnnxOpt = None,
    url: UrlOpt = None,
    protocol: ProtocolOpt = "v2",
    name: ModelOpt = None,
    param: ParamOpt = None,
    since: Annotated[
        dt.datetime | None,
        typer.Option("--from", help="The first record's time (ISO 8601; default: the beginning)."),
    ] = None,
    until: Annotated[
        dt.datetime | None,
        typer.Option("--to", help="Records before this time (ISO 8601; default: now)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many records.")] = 100_000,
    out: Annotated[
        Path, typer.Option("--out", help="The folder for the outputs and report.json.")
    ] = Path("backtest"),
    label_field: Annotated[
        str, typer.Option(help="The input's field with the true value, if it has one.")
    ] = "label",
    bootstrap_servers: BootstrapOpt = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Replay recorded input through the stable model and a candidate, offline.

    Serves a range of the streamlet's input topic with each version, in memory.
    The streamlet's own logic and config serve it; nothing is written to Kafka.
    Writes stable.jsonl, candidate.jsonl and report.json to --out.
    Two runs over the same range write the same bytes."""
    request = push_request(
        {"keras": keras, "saved_model": saved_model, "onnx": onnx},
        url=url,
        protocol=protocol,
        version=None,
        name=name,
        param=param,
        by_reference=False,
        description="backtest candidate",
    )
    check_format(fmt)
    app, bootstrap = resolve(target, bootstrap_servers, registry)
    with apps.kafka_errors(bootstrap), push_errors():
        clients = apps.kafka_clients(app, bootstrap)
        now = Rollouts(versions.ModelChannel(app, clients, streamlet)).standing(name)
        if now.stable is None:
            output.fail(
                f"{streamlet} has no stable version to compare with",
                hint="push one first: streamflow model push",
            )
        stable = now.stable
        candidate = request.descriptor(stable.name, stable.version + 1)
        said = output.error_console() if fmt != "table" else output.console()
        try:
            with progress.waiting(
                "reading the input", detail="0 records", machine_output=fmt != "table"
            ) as wait:
                topic, records, undecodable = backtests.read_range(
                    app,
                    clients,
                    streamlet,
                    start=_aware(since),
                    end=_aware(until),
                    limit=limit,
                    progress=lambda n: wait.update(f"{n} records"),
                )
                wait.done(f"read {len(records)} records of {topic}")
            if undecodable:
                said.print(f"{undecodable} records of {topic} did not decode: left out")
            if not records:
                output.fail(f"no record of {topic} in that range")
            report = backtests.run_backtest(
                app,
                streamlet,
                records,
                {"stable": stable, "candidate": candidate},
                out_dir=out,
                label_field=label_field,
                say=lambda line: said.print(line),
            )
        except backtests.BacktestError as exc:
            output.fail(str(exc))
    if fmt != "table":
        output.print_data(report, fmt=fmt)
        return
    table = Table("version", "model", "served", "dead letters", "labelled", "accuracy")
    for role, mine in report["versions"].items():
        accuracy = mine["accuracy"]
        table.add_row(
            role,
            mine["model"],
            str(mine["served"]),
            str(mine["dead_letters"]),
            str(mine["labelled"]),
            "-" if accuracy is None else f"{accuracy:.1%}",
        )
    output.console().print(table)
    agreement, distance = report.get("agreement"), report.get("distance")
    output.console().print(
        f"agreement {'-' if agreement is None else f'{agreement:.1%}'} of "
        f"{report.get('compared', 0)} records, class distance "
        f"{'-' if distance is None else f'{distance:.3f}'}; written to {out}/"
    )


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    """A time given without a zone is UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=dt.UTC)
