"""``streamflow score``: a data set through an application, results collected back.

Batch through streaming: a backfill, a nightly batch or an evaluation on a
labelled set goes through the same streamlets, model version and code as the
live stream (see :mod:`streamflow.score.engine`). Against a running application
the run shares it with live traffic; with ``--start`` the application runs here
for the run only, as ``streamflow run`` would run it.

A run saves its state beside the results (``<results>.score-state.json``) as
it goes. Run the same command again after an interruption and it resumes: the
results already out are read back from Kafka and only the rows Kafka had not
acknowledged are sent again. ``--restart`` starts over with a new run id.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from streamflow.blueprint.model import Application
from streamflow.cli import apps, output, registry_opts
from streamflow.cli import overrides as overrides_mod
from streamflow.cli import progress as progress_mod
from streamflow.score import engine, inputs, job
from streamflow.score.plan import PlanError, ScorePlan, plan

__all__ = ["register"]

console = Console(stderr=True, highlight=False, soft_wrap=True)


def score(
    target: Annotated[
        str, typer.Argument(help="A blueprint file, or the name of a running application.")
    ],
    input_path: Annotated[
        Path,
        typer.Option(
            "--input",
            "-i",
            help="The data set: .parquet, .csv or .jsonl (one row per input record).",
            exists=True,
            dir_okay=False,
        ),
    ],
    output_path: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Where the results go: .parquet, .csv or .jsonl, one row per input row "
            "that came out, in input order, with its row number in the 'row' column. "
            "Dead letters go beside it, in <name>.dead-letters.jsonl.",
            dir_okay=False,
        ),
    ],
    input_format: Annotated[
        str | None,
        typer.Option("--format", help="The input's format, if its extension does not say."),
    ] = None,
    into: Annotated[
        str | None,
        typer.Option("--into", help="The topic to feed (default: the application's input)."),
    ] = None,
    read_from: Annotated[
        str | None,
        typer.Option(
            "--from", help="The topic to collect results from (default: what the input feeds)."
        ),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Name this run (default: a new id, or the interrupted run's when resuming).",
        ),
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Start over instead of resuming an interrupted run.")
    ] = False,
    start: Annotated[
        bool,
        typer.Option(
            "--start",
            help="Run the application here for the run (a blueprint only), as `streamflow "
            "run` does, and stop it afterwards.",
        ),
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="With --start: override a config value, streamlet.param=value."),
    ] = None,
    max_in_flight: Annotated[
        int,
        typer.Option(min=1, help="Rows sent and not yet back, at most: the feed's backpressure."),
    ] = 10_000,
    stall_timeout: Annotated[
        float,
        typer.Option(
            min=1, help="Give up when rows are out and nothing came back for this many seconds."
        ),
    ] = 300.0,
    progress_format: Annotated[
        str,
        typer.Option(
            "--progress",
            help="auto (a bar on a terminal, JSON lines otherwise), bar, json or none.",
        ),
    ] = "auto",
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", "-b", envvar="STREAMFLOW_KAFKA_BOOTSTRAP")
    ] = None,
    registry: registry_opts.RegistryOpt = None,
) -> None:
    """Score a data set through an application and collect the results."""
    if progress_format not in ("auto", "bar", "json", "none"):
        output.fail(
            f"unknown --progress {progress_format!r}: use auto, bar, json or none",
            exit_code=output.EXIT_USAGE,
        )
    try:
        fmt = inputs.data_format(input_path, input_format)
        inputs.data_format(output_path)
    except inputs.InputError as exc:
        output.fail(str(exc), exit_code=output.EXIT_USAGE)
    if set_ and not start:
        output.fail(
            "--set changes the application that --start runs; a running one keeps its config",
            hint="`streamflow configure` changes a deployed application's config",
            exit_code=output.EXIT_USAGE,
        )
    try:
        overrides = overrides_mod.collect(set_ or [], None)
    except overrides_mod.OverrideError as exc:
        output.fail(str(exc), exit_code=output.EXIT_USAGE)
    with _application(target, bootstrap_servers, registry, start=start, overrides=overrides) as (
        app,
        bootstrap,
        tick,
    ):
        try:
            chosen = plan(app, into=into, read_from=read_from)
        except PlanError as exc:
            output.fail(str(exc), hint="`streamflow graph` shows the application's topics")
        request = job.ScoreRequest(
            input_path=input_path,
            fmt=fmt,
            output_path=output_path,
            run_id=run_id,
            restart=restart,
            max_in_flight=max_in_flight,
            stall_timeout=stall_timeout,
        )
        _score(chosen, bootstrap, request, progress_format=progress_format, tick=tick)


@contextlib.contextmanager
def _application(
    target: str,
    bootstrap_servers: str | None,
    registry: str | None,
    *,
    start: bool,
    overrides: dict[str, Any],
) -> Iterator[tuple[Application, str, Callable[[], None] | None]]:
    """(the application, its Kafka, a tick for the supervisor when started here)."""
    if not start:
        app, bootstrap = apps.resolve(target, bootstrap_servers)
        if registry:
            app = registry_opts.with_registry(app, registry)
        yield app, bootstrap, None
        return
    path = Path(target)
    if not path.is_file():
        output.fail(f"--start needs a blueprint file, not {target!r}")
    verified = registry_opts.verified(
        path, overrides=overrides, registry_url=registry, require_registry=False
    )
    if verified.application is None:
        output.print_problems(verified.problems, to=output.error_console())
        raise typer.Exit(output.EXIT_INVALID)
    from streamflow.cli import run_cmds  # the supervisor and devkit: only to start the app

    run_cmds.refuse_deployed(verified.application)
    with run_cmds.running(
        verified.application, bootstrap_servers, on_line=lambda _replica, _line: None
    ) as started:
        console.print(
            f"[bold]streamflow[/]: {started.app.name} started here for the run, "
            f"{len(started.replicas)} replicas (`streamflow logs {started.app.name}` shows "
            "their logs)"
        )
        yield started.app, started.bootstrap, started.supervisor.tick


def _score(
    chosen: ScorePlan,
    bootstrap: str,
    request: job.ScoreRequest,
    *,
    progress_format: str,
    tick: Callable[[], None] | None,
) -> None:
    def resumed(saved: engine.RunState) -> None:
        console.print(
            f"[bold]streamflow[/]: resuming run {saved.run}: "
            f"{saved.acknowledged:,} of {saved.total:,} rows were sent"
        )

    shown: list[Callable[[engine.Progress], None] | None] = []

    def started(state: engine.RunState) -> None:
        _say(
            f"run {state.run}: {state.total:,} rows of {request.input_path.name} into "
            f"{chosen.input_topic.name!r}, results from {chosen.output_topic.name!r}",
            progress_format,
        )
        shown.append(bars.enter_context(_progress(progress_format, state.total)))

    def show(progress: engine.Progress) -> None:
        if shown and shown[0] is not None:
            shown[0](progress)

    with apps.kafka_errors(bootstrap):
        try:
            with contextlib.ExitStack() as bars:  # the bar is gone before an error shows
                done = job.score(
                    chosen,
                    apps.kafka_clients(chosen.app, bootstrap),
                    request,
                    on_resume=resumed,
                    on_start=started,
                    on_progress=show,
                    tick=tick,
                )
        except job.ScoreInterrupted as exc:
            output.fail(str(exc), exit_code=130)
        except engine.ScoreError as exc:
            output.fail(str(exc), hint=getattr(exc, "hint", ""))
    if progress_format == "json" or (progress_format == "auto" and not console.is_terminal):
        sys.stdout.write(json.dumps(done.to_json()) + "\n")
    else:
        line = f"{done.results:,} results in {done.output}"
        if done.dead_letters_file is not None:
            line += f"; {output.plural(done.dead_letters, 'row')} dead-lettered, in "
            line += str(done.dead_letters_file)
        console.print(f"[bold]streamflow[/]: run {done.run} done: {line}")


def _say(message: str, progress_format: str) -> None:
    if progress_format != "none":
        console.print(f"[bold]streamflow[/]: {escape(message)}")  # names are not markup


@contextlib.contextmanager
def _progress(
    progress_format: str, total: int
) -> Iterator[Callable[[engine.Progress], None] | None]:
    mode = progress_format
    if mode == "auto":
        live = progress_mod.choose_mode(console) is progress_mod.Mode.LIVE
        mode = "bar" if live else "json"
    if mode == "none":
        yield None
        return
    if mode == "json":

        def line(progress: engine.Progress) -> None:
            sys.stderr.write(json.dumps(progress.to_json()) + "\n")
            sys.stderr.flush()

        yield line
        return
    bar = Progress(
        TextColumn("scoring"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task = bar.add_task("score", total=total, rate="")
    started = time.monotonic()

    def update(progress: engine.Progress) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        bar.update(
            task,
            completed=progress.accounted,
            total=progress.total,
            rate=f"{progress.accounted / elapsed:,.0f} rows/s",
        )

    with bar:
        yield update


def register(app: typer.Typer) -> None:
    app.command("score")(score)
