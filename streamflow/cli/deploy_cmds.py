"""Deployed applications: deploy, undeploy, list, status, scale, configure, configuration, logs.

Each command picks a target (``--target local``, the default: replica
processes on this machine under a supervisor daemon; or ``kubernetes``) and
speaks only the :class:`~streamflow.operator.targets.Target` protocol, so the
words, flags and output are the same on both. Changes are checked before they
are applied: a wrong streamlet or a config value of the wrong type ends in a
message and exit 1 with nothing changed; a malformed argument is a usage
error (exit 2). Commands that change what runs wait until every replica is
ready (:mod:`streamflow.cli.rollout`), unless told ``--no-wait``: a live line
on a terminal, plain lines on stderr otherwise, and with ``-o json|yaml`` the
final status as data on stdout and nothing else there.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from streamflow.cli import deploy_views as views
from streamflow.cli import output, progress, registry_opts, rollout, undeploy_wait
from streamflow.cli import overrides as overrides_mod
from streamflow.cli.targeting import LOCAL, TargetChoice, with_target
from streamflow.operator import planner, targets

__all__ = ["register"]


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")]
AppArg = Annotated[str, typer.Argument(help="The application's name.")]
WaitOpt = Annotated[
    bool, typer.Option("--wait/--no-wait", help="Wait until every replica is ready.")
]
TimeoutOpt = Annotated[str, typer.Option("--timeout", help="How long to wait (e.g. 90s, 5m).")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress while waiting; errors still show.")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="STREAMLET.PARAM=VALUE",
        help="A config value (repeatable; wins over --conf).",
    ),
]
ConfOpt = Annotated[
    Path | None,
    typer.Option(
        help="A YAML file of config values: {streamlet: {param: value}}.",
        exists=True,
        dir_okay=False,
    ),
]


@with_target
def deploy(
    blueprint: Annotated[
        Path, typer.Argument(help="The blueprint YAML file.", exists=True, dir_okay=False)
    ],
    set_: SetOpt = None,
    conf: ConfOpt = None,
    scale_: Annotated[
        list[str] | None,
        typer.Option(
            "--scale", metavar="STREAMLET=N", help="Replicas of a streamlet (repeatable)."
        ),
    ] = None,
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            "--bootstrap-servers",
            "-b",
            help="Kafka (default: the blueprint's, $STREAMFLOW_KAFKA_BOOTSTRAP, else embedded).",
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="kubernetes: the streamlets' image, the streamflow image with the project at "
            "/app (e.g. registry.example/wine:1). Required for a new application; an update "
            "keeps the deployed image unless given."
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="kubernetes: print the StreamflowApplication that would be applied (-o yaml "
            "or json; yaml by default), and contact no cluster: for GitOps, or kubectl apply.",
        ),
    ] = False,
    where: TargetChoice = LOCAL,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = "120s",
    fmt: OutputOpt = Format.table,
    quiet: QuietOpt = False,
    registry: registry_opts.RegistryOpt = None,
) -> None:
    """Verify a blueprint and deploy its application (or update it when already deployed)."""
    follow = rollout.Follow(wait, _seconds(timeout), fmt.value, quiet)
    replicas = _counts(scale_ or [], option="--scale")
    try:
        overrides = overrides_mod.collect(set_ or [], conf)
    except overrides_mod.OverrideError as exc:
        output.fail(str(exc))
    result = registry_opts.verified(blueprint, overrides=overrides, registry_url=registry)
    if result.application is None:
        output.print_problems(result.problems, to=output.error_console())
        raise typer.Exit(output.EXIT_INVALID)
    app = result.application
    if dry_run:
        _print_resource(app, where, replicas, bootstrap_servers, image, fmt)
        return
    if not where.local:
        views.check_portable(app)
    chosen = where.open(image=image)
    if not where.local and not image:
        _require_deployed(chosen, app.name)
    bootstrap = (
        bootstrap_servers or app.kafka.bootstrap or os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP")
    )
    embedded = "" if bootstrap or not where.local else " and an embedded Kafka"
    first = f"starting the supervisor{embedded}" if where.local else "applying"
    with progress.waiting(
        f"deploying {app.name}", detail=first, machine_output=follow.machine_output, quiet=quiet
    ):
        change = rollout.attempt(
            lambda: chosen.deploy(targets.scaled(app, replicas), bootstrap=bootstrap)
        )
    views.print_warnings(change.warnings)
    views.print_actions("deployed", change, target=chosen.kind)
    rollout.finish(chosen, app.name, ("deploying", "deployed"), follow)


_IMAGE_HINT = (
    "pass --image REF: an image of the streamflow image with this project at /app "
    "(see operator/README.md)"
)


def _print_resource(
    app: Any,
    where: TargetChoice,
    replicas: dict[str, int],
    bootstrap: str | None,
    image: str | None,
    fmt: Format,
) -> None:
    """``--dry-run``: the resource a Kubernetes deploy would apply, asking no cluster."""
    if where.local:
        output.fail(
            "--dry-run prints a Kubernetes resource: it needs --target kubernetes",
            exit_code=output.EXIT_USAGE,
        )
    if not image:
        output.fail("a Kubernetes deploy needs the streamlets' image", hint=_IMAGE_HINT)
    views.check_portable(app)
    resource = views.resource_body(
        targets.scaled(app, replicas), bootstrap=bootstrap, image=image, namespace=where.namespace
    )
    output.print_data(resource, fmt="json" if fmt is Format.json else "yaml")


def _require_deployed(chosen: targets.Target, name: str) -> None:
    """Without ``--image``, only an update (which keeps the deployed image) may go on."""
    try:
        chosen.application(name)
    except targets.TargetError as exc:
        if not exc.message.startswith("no application"):
            output.fail(exc.message, hint=exc.hint)
        output.fail(
            f"{name!r} is not deployed yet, and a new Kubernetes application needs the "
            "streamlets' image",
            hint=_IMAGE_HINT,
        )


@with_target
def undeploy(
    name: AppArg,
    delete_topics: Annotated[
        bool, typer.Option(help="Delete the application's topics too (kept by default).")
    ] = False,
    where: TargetChoice = LOCAL,
    wait: undeploy_wait.UndeployWaitOpt = True,
    timeout: undeploy_wait.UndeployTimeoutOpt = "120s",
    quiet: QuietOpt = False,
) -> None:
    """Stop every replica of an application and remove it; its topics stay unless asked."""
    limit = _seconds(timeout)
    chosen = where.open()

    def left() -> str:
        return f"{output.plural(rollout.replicas_left(chosen.status(name)), 'replica')} left"

    first = rollout.attempt(left)  # an unknown app ends here, before anything is asked
    with progress.waiting(f"stopping {name}", detail=first, quiet=quiet) as waiter:
        deleted = rollout.attempt(
            lambda: rollout.run_with_progress(
                lambda: chosen.undeploy(name, delete_topics=delete_topics), wait=waiter, poll=left
            )
        )
        if wait:  # Kubernetes: until the resource and its children are gone (exit 1 if stuck)
            undeploy_wait.wait_gone(chosen, name, wait=waiter, timeout=limit)
        waiter.done(f"{'undeployed' if wait else 'undeploying'} {name} from {chosen.kind}")
    errors = output.error_console()
    if delete_topics:
        errors.print(f"deleted topics: {', '.join(deleted) or 'none'}", markup=False)
    elif not quiet:
        errors.print("its topics are kept (--delete-topics deletes them)", markup=False)


@with_target
def list_(
    fmt: OutputOpt = Format.table,
    where: TargetChoice = LOCAL,
) -> None:
    """The deployed applications, with their phase and ready replicas."""
    chosen = where.open()
    found = rollout.attempt(chosen.list)
    if fmt is not Format.table:
        output.print_data([views.summary(s) for s in found], fmt=fmt.value)
    else:
        views.print_list(found)


@with_target
def status(
    name: AppArg,
    fmt: OutputOpt = Format.table,
    where: TargetChoice = LOCAL,
) -> None:
    """Per streamlet: replicas ready and desired, restarts, consumer lag, the model served."""
    chosen = where.open()
    found = rollout.attempt(lambda: chosen.status(name))
    if fmt is not Format.table:
        output.print_data(found.to_dict(), fmt=fmt.value)
    else:
        views.print_status(found)


@with_target
def scale(
    name: AppArg,
    counts: Annotated[
        list[str],
        typer.Argument(
            metavar="STREAMLET N | STREAMLET=N...", help="`scorer 3`, or `scorer=3 sink=0`."
        ),
    ],
    where: TargetChoice = LOCAL,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = "120s",
    fmt: OutputOpt = Format.table,
    quiet: QuietOpt = False,
) -> None:
    """Set the number of replicas of one streamlet or several."""
    follow = rollout.Follow(wait, _seconds(timeout), fmt.value, quiet)
    if len(counts) == 2 and "=" not in counts[0] and "=" not in counts[1]:
        counts = [f"{counts[0]}={counts[1]}"]
    replicas = _counts(counts, option="scale")
    if not replicas:
        output.fail("say which streamlet to scale: STREAMLET N", exit_code=output.EXIT_USAGE)
    chosen = where.open()
    change = rollout.attempt(lambda: chosen.scale(name, replicas))
    views.print_warnings(change.warnings)
    views.print_actions("scaled", change, target=chosen.kind)
    before = {a.streamlet: a.previous for a in change.actions if isinstance(a, planner.Scale)}
    rollout.finish(chosen, name, ("scaling", "scaled"), follow, previous=before)


@with_target
def configure(
    name: AppArg,
    set_: SetOpt = None,
    conf: ConfOpt = None,
    where: TargetChoice = LOCAL,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = "120s",
    fmt: OutputOpt = Format.table,
    quiet: QuietOpt = False,
) -> None:
    """Change config values; only the streamlets whose config changed restart."""
    follow = rollout.Follow(wait, _seconds(timeout), fmt.value, quiet)
    try:
        settings = overrides_mod.collect(set_ or [], conf)
    except overrides_mod.OverrideError as exc:
        output.fail(str(exc))
    if not settings:
        output.fail("nothing to configure: give --set or --conf", exit_code=output.EXIT_USAGE)
    chosen = where.open()
    change = rollout.attempt(lambda: chosen.configure(name, settings))
    views.print_actions("configured", change, target=chosen.kind)
    rollout.finish(chosen, name, ("configuring", "configured"), follow)


@with_target
def configuration(
    name: AppArg,
    fmt: OutputOpt = Format.table,
    where: TargetChoice = LOCAL,
) -> None:
    """The effective config of every streamlet, defaults filled in."""
    chosen = where.open()
    found = rollout.attempt(lambda: chosen.configuration(name))
    if fmt is not Format.table:
        output.print_data(found, fmt=fmt.value)
    else:
        views.print_configuration(found)


@with_target
def logs(
    name: AppArg,
    streamlet: Annotated[str, typer.Argument(help="The streamlet whose replicas' logs to show.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    replica: Annotated[
        int | None, typer.Option(min=0, help="Only this replica (default: all, prefixed).")
    ] = None,
    tail: Annotated[
        int | None, typer.Option(min=0, help="Only the last N lines of each replica.")
    ] = None,
    where: TargetChoice = LOCAL,
) -> None:
    """Print the logs of a streamlet's replicas; -f follows them until Ctrl-C."""
    chosen = where.open()
    lines = chosen.logs(name, streamlet, follow=follow, replica=replica, tail=tail)
    try:
        for line in rollout.attempt(lambda: _first_and_rest(lines)):
            typer.echo(line.text if replica is not None else f"{line.replica} | {line.text}")
    except KeyboardInterrupt:
        pass


# -- helpers -------------------------------------------------------------------------------------


def _first_and_rest(lines: Iterable[targets.LogLine]) -> Iterator[targets.LogLine]:
    """Pull the first line now, so an unknown app or streamlet fails inside ``_attempt``."""
    iterator = iter(lines)
    try:
        first = next(iterator)
    except StopIteration:
        return iter(())

    def chained() -> Iterator[targets.LogLine]:
        yield first
        yield from iterator

    return chained()


def _counts(pairs: list[str], *, option: str) -> dict[str, int]:
    """``{streamlet: n}`` from ``streamlet=n`` pairs; a usage error (exit 2) for anything else."""
    out: dict[str, int] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        try:
            count = int(raw) if sep and name.strip() else None
        except ValueError:
            count = None
        if count is None:
            output.fail(
                f"{option} {pair!r}: expected STREAMLET=N with N a whole number, e.g. scorer=3",
                exit_code=output.EXIT_USAGE,
            )
        if count < 0:
            output.fail(
                f"the number of replicas of {name.strip()!r} must be 0 or more, not {count}",
                exit_code=output.EXIT_USAGE,
            )
        out[name.strip()] = count
    return out


def _seconds(text: str) -> float:
    try:
        return overrides_mod.duration_seconds(text)
    except overrides_mod.OverrideError as exc:
        output.fail(f"--timeout {text!r}: {exc}", exit_code=output.EXIT_USAGE)


def register(app: typer.Typer) -> None:
    app.command()(deploy)
    app.command()(undeploy)
    app.command("list")(list_)
    app.command()(status)
    app.command(context_settings={"ignore_unknown_options": True})(scale)
    app.command()(configure)
    app.command()(configuration)
    app.command()(logs)
