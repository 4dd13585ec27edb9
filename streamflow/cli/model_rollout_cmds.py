"""``streamflow model rollout``: a candidate model beside the stable one, live.

``start`` writes the next version as a candidate (``--mode shadow|canary|ab``,
``--share`` of the keys), and waits until every replica has loaded it; ``set`` changes
the running candidate's mode or share (no load); ``promote`` makes it the stable version
everywhere (the replicas adopt the loaded candidate); ``abort`` rolls it back; ``status``
shows where the rollout stands and what each replica said. Each is a control record
(:mod:`streamflow.operator.model_rollouts`), applied between batches under either
delivery guarantee, with no replica restarted and no record lost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer
import yaml
from rich.text import Text

from streamflow.cli import apps, model_backtest_cmds, model_wait, output, registry_opts
from streamflow.cli.model_opts import (
    BootstrapOpt,
    ByReferenceOpt,
    DescriptionOpt,
    Following,
    FormatOpt,
    KerasOpt,
    OnnxOpt,
    ParamOpt,
    ProtocolOpt,
    QuietOpt,
    SavedModelOpt,
    StreamletArg,
    TargetArg,
    TimeoutOpt,
    UrlOpt,
    VersionOpt,
    check_format,
    follow,
    push_errors,
    push_request,
    resolve,
)
from streamflow.models.kinds import ModelState
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.rollout_policy import POLICY_PARAMETER, Policy, PolicyError
from streamflow.operator import model_versions as versions
from streamflow.operator.model_rollouts import Rollouts, Standing, blueprint_policy, controllers

__all__ = ["rollout_app"]

rollout_app = typer.Typer(
    help="Roll a candidate model out beside the stable one (shadow, canary or A/B), then "
    "promote or abort it.",
    no_args_is_help=True,
)

ModeOpt = Annotated[
    str | None,
    typer.Option(
        help="shadow (every record, results to the shadow outlet), canary (a share of the "
        "keys) or ab (a share, between two named arms). Default: canary, or the policy's "
        "first step."
    ),
]
ShareOpt = Annotated[
    float | None,
    typer.Option(
        help="The percent (0-100) of the keys the candidate serves. Default: 5, or the "
        "policy's first step."
    ),
]
ArmsOpt = Annotated[
    str, typer.Option(help="ab: the stable arm's name and the candidate's, as A,B.")
]
ModelOpt = Annotated[str | None, typer.Option(help="The model (default: the one served).")]
PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        help="A rollout policy (YAML or JSON: steps, thresholds) for the application's "
        "rollout controller to follow; the first step sets --mode and --share.",
        exists=True,
        dir_okay=False,
    ),
]


@rollout_app.command("start")
def start(
    target: TargetArg,
    streamlet: StreamletArg,
    saved_model: SavedModelOpt = None,
    keras: KerasOpt = None,
    onnx: OnnxOpt = None,
    url: UrlOpt = None,
    protocol: ProtocolOpt = "v2",
    mode: ModeOpt = None,
    share: ShareOpt = None,
    arms: ArmsOpt = "",
    policy: PolicyOpt = None,
    version: VersionOpt = None,
    name: ModelOpt = None,
    param: ParamOpt = None,
    by_reference: ByReferenceOpt = False,
    description: DescriptionOpt = "",
    timeout: TimeoutOpt = 120.0,
    bootstrap_servers: BootstrapOpt = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: FormatOpt = "table",
    quiet: QuietOpt = False,
) -> None:
    """Start a rollout: the next version as a candidate, and wait until every replica has it.

    With --policy, or a rollout controller with a policy in the application:
    the controller moves the candidate through the policy's steps,
    then promotes it or rolls it back by evidence.
    The policy's first step sets --mode and --share."""
    steps = _policy(policy)
    if steps is not None:
        first = steps.steps[0]
        mode = mode or first.mode.value
        share = share if share is not None else first.share
        _on_a_step(steps, _rollout(mode, share, arms))
        param = [*(param or []), f"{POLICY_PARAMETER}={json.dumps(steps.to_mapping())}"]
    request = push_request(
        {"keras": keras, "saved_model": saved_model, "onnx": onnx},
        url=url,
        protocol=protocol,
        version=version,
        name=name,
        param=param,
        by_reference=by_reference,
        description=description,
    )
    check_format(fmt)
    app, bootstrap = resolve(target, bootstrap_servers, registry)
    with apps.kafka_errors(bootstrap), push_errors():
        channel = versions.ModelChannel(app, apps.kafka_clients(app, bootstrap), streamlet)
        if steps is None and mode is None and share is None:
            # a controller's own policy starts where its first step says
            own = blueprint_policy(app, channel.control.name)
            if own is not None:
                mode, share = own.steps[0].mode.value, own.steps[0].share
        rollout = _rollout(mode or "canary", 5.0 if share is None else share, arms)
        if steps is not None and not controllers(app, channel.control.name):
            output.console().print(
                f"note: no rollout controller follows {channel.control.name} in {app.name}: "
                "the policy waits for one (add a RolloutController to the blueprint)"
            )
        pushed = Rollouts(channel).start(request, rollout)
        said = Text.assemble(
            "rolling out ",
            (f"{pushed.model}:{pushed.version}", "bold"),
            f" as a candidate ({rollout.describe()}) on {pushed.topic}",
        )
        follow(said, channel, pushed, Following(app, streamlet, timeout, fmt, quiet))


@rollout_app.command("set")
def set_(
    target: TargetArg,
    streamlet: StreamletArg,
    share: Annotated[float | None, typer.Option(help="The candidate's new share (0-100).")] = None,
    mode: Annotated[str | None, typer.Option(help="shadow, canary or ab.")] = None,
    arms: ArmsOpt = "",
    name: ModelOpt = None,
    timeout: TimeoutOpt = 60.0,
    bootstrap_servers: BootstrapOpt = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: FormatOpt = "table",
    quiet: QuietOpt = False,
) -> None:
    """Change the running candidate's share or mode; the replicas switch with no load."""
    if share is None and mode is None and not arms:
        output.fail("give --share, --mode or both", exit_code=output.EXIT_USAGE)
    check_format(fmt)
    app, bootstrap = resolve(target, bootstrap_servers, registry)
    with apps.kafka_errors(bootstrap), push_errors():
        channel = versions.ModelChannel(app, apps.kafka_clients(app, bootstrap), streamlet)
        rollouts = Rollouts(channel)
        running = rollouts.standing(name).candidate
        was = running.rollout if running is not None else None
        rollout = _changed(was, mode=mode, share=share, arms=arms) if was else None
        if rollout is None:  # no rollout runs: change says so, in its words
            rollout = _rollout(mode or "canary", share or 0.0, arms)
        pushed = rollouts.change(rollout, name)
        said = Text.assemble(
            (f"{pushed.model}:{pushed.version}", "bold"), f" now meets: {rollout.describe()}"
        )
        follow(said, channel, pushed, Following(app, streamlet, timeout, fmt, quiet))


@rollout_app.command("promote")
def promote(
    target: TargetArg,
    streamlet: StreamletArg,
    name: ModelOpt = None,
    timeout: TimeoutOpt = 60.0,
    bootstrap_servers: BootstrapOpt = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: FormatOpt = "table",
    quiet: QuietOpt = False,
) -> None:
    """Make the candidate the stable version on every replica (no second load)."""
    how = _Ending(target, streamlet, name, timeout, bootstrap_servers, registry, fmt, quiet)
    _end(how, Rollouts.promote, "promoting ", ModelState.SERVING)


@rollout_app.command("abort")
def abort(
    target: TargetArg,
    streamlet: StreamletArg,
    name: ModelOpt = None,
    timeout: TimeoutOpt = 60.0,
    bootstrap_servers: BootstrapOpt = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: FormatOpt = "table",
    quiet: QuietOpt = False,
) -> None:
    """Roll the candidate back: every replica unloads it and serves the stable version."""
    how = _Ending(target, streamlet, name, timeout, bootstrap_servers, registry, fmt, quiet)
    _end(how, Rollouts.abort, "rolling back ", ModelState.RETIRED)


class _Ending(NamedTuple):
    """What ``promote`` and ``abort`` were given."""

    target: str
    streamlet: str
    name: str | None
    timeout: float
    bootstrap_servers: str | None
    registry: str | None
    fmt: str
    quiet: bool


def _end(
    how: _Ending,
    action: Callable[[Rollouts, str | None], versions.Pushed],
    saying: str,
    goal: ModelState,
) -> None:
    """Write the rollout's end (``action``), then wait for every replica to reach ``goal``."""
    check_format(how.fmt)
    app, bootstrap = resolve(how.target, how.bootstrap_servers, how.registry)
    with apps.kafka_errors(bootstrap), push_errors():
        clients = apps.kafka_clients(app, bootstrap)
        channel = versions.ModelChannel(app, clients, how.streamlet)
        pushed = action(Rollouts(channel), how.name)
        said = Text.assemble(saying, (f"{pushed.model}:{pushed.version}", "bold"))
        following = Following(app, how.streamlet, how.timeout, how.fmt, how.quiet, goal=goal)
        follow(said, channel, pushed, following)


@rollout_app.command("status")
def status(
    target: TargetArg,
    streamlet: StreamletArg,
    name: ModelOpt = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            "-w",
            help="Then print each decision of the rollout's controller as it is made, "
            "until the rollout ends (promoted or rolled back).",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=0, help="With --watch: give up after this many seconds (0: never).")
    ] = 0.0,
    bootstrap_servers: BootstrapOpt = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Show the stable version, the candidate and its share, and what each replica said."""
    check_format(fmt)
    if watch and fmt != "table":
        output.fail(
            "--watch prints lines as they come: use it with -o table", exit_code=output.EXIT_USAGE
        )
    app, bootstrap = resolve(target, bootstrap_servers, registry)
    with apps.kafka_errors(bootstrap), push_errors():
        clients = apps.kafka_clients(app, bootstrap)
        rollouts = Rollouts(versions.ModelChannel(app, clients, streamlet))
        now = rollouts.standing(name)
        latest = versions.latest_statuses(app, clients, streamlet)
        decisions = rollouts.decisions(now.model) if now.model else []
    stable, candidate = now.stable, now.candidate
    data = {
        "model": now.model,
        "stable": stable.version if stable else None,
        "candidate": candidate.version if candidate else None,
        "rollout": candidate.rollout.to_record() if candidate and candidate.rollout else None,
        "replicas": list(latest.values()),
        "decisions": decisions,
    }
    if fmt != "table":
        output.print_data(data, fmt=fmt)
        return
    said = Text.assemble((now.model or "no model", "bold"), ": ")
    said.append(f"stable {stable.version}" if stable else "no stable version")
    if candidate is not None and candidate.rollout is not None:
        said.append(f", candidate {candidate.version} ({candidate.rollout.describe()})")
    else:
        said.append(", no rollout runs")
    output.console().print(said)
    if decisions:
        output.console().print(model_wait.decision_line(decisions[-1]))
    if latest:
        model_wait.print_status_table(latest)
    if watch:
        with apps.kafka_errors(bootstrap), push_errors():
            _watch(rollouts, now, decisions, timeout)


_WATCH_POLL_S = 2.0  # how often --watch reads the decisions topic again


def _watch(rollouts: Rollouts, now: Standing, seen: list[dict[str, Any]], timeout: float) -> None:
    """Print each new decision about the running candidate until one ends the rollout;
    exit 1 when ``timeout`` passes first."""
    candidate = now.candidate
    if candidate is None:
        output.console().print("no rollout runs: nothing to watch")
        return
    said = {(d["candidate_version"], d["sequence"]) for d in seen}
    output.error_console().print(
        f"watching the rollout of {candidate.tag} (Ctrl-C stops watching, not the rollout)"
    )
    deadline = time.monotonic() + timeout if timeout else None
    feed, control, ends = rollouts.feed(), rollouts.channel.control.name, None
    while deadline is None or time.monotonic() < deadline:
        for decision in feed.read(now.model, candidate.version):
            place = (decision["candidate_version"], decision["sequence"])
            if place in said:
                continue
            said.add(place)
            output.console().print(model_wait.decision_line(decision))
            if decision["verdict"] in ("PROMOTE", "ROLLBACK"):
                return
        moved = versions.end_offsets(rollouts.channel.clients, control)
        if moved != ends:  # the model topic is read again only when it moved
            ends = moved
            if rollouts.standing(now.model).candidate is None:  # ended by hand
                output.console().print(f"the rollout of {candidate.tag} has ended")
                return
        time.sleep(_WATCH_POLL_S)
    output.fail(f"the rollout of {candidate.tag} did not end within {timeout:g}s")


def _changed(was: Rollout, *, mode: str | None, share: float | None, arms: str) -> Rollout:
    """The running rollout with what ``set`` was given: the rest kept where it still
    applies (arms only for ab; a share only for canary and ab, and asked for when a
    shadow becomes one)."""
    chosen = mode or was.mode.value
    shadow = chosen.upper() == RolloutMode.SHADOW.value
    if shadow and share is not None:
        output.fail(
            "--share is for canary and ab: a shadow meets every record", exit_code=output.EXIT_USAGE
        )
    if not shadow and share is None:
        if not was.splits:
            output.fail(
                f"give --share: the candidate runs as a {was.mode.value.lower()}",
                exit_code=output.EXIT_USAGE,
            )
        share = was.share
    if chosen.upper() == RolloutMode.AB.value and not arms and was.mode is RolloutMode.AB:
        arms = ",".join(was.arms)
    return _rollout(chosen, share or 0.0, arms)


def _policy(path: Path | None) -> Policy | None:
    """The policy in ``path`` (YAML or JSON), checked; a usage error naming what is wrong."""
    if path is None:
        return None
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Policy.from_mapping(raw)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        output.fail(f"--policy {path}: cannot read it: {exc}", exit_code=output.EXIT_USAGE)
    except PolicyError as exc:
        output.fail(f"--policy {path}: {exc}", exit_code=output.EXIT_USAGE)


def _on_a_step(policy: Policy, rollout: Rollout) -> None:
    """A usage error for a start the controller would leave alone (off the policy's steps)."""
    if policy.step_of(rollout.mode, rollout.share) is None:
        steps = ", ".join(
            s.mode.value.lower() if s.mode is RolloutMode.SHADOW else f"canary {s.share:g}"
            for s in policy.steps
        )
        output.fail(
            f"--mode {rollout.mode.value.lower()} --share {rollout.share:g} is not a step of "
            f"the policy ({steps}): its controller would leave the rollout alone",
            hint="leave --mode and --share out to start at its first step",
            exit_code=output.EXIT_USAGE,
        )


def _rollout(mode: str, share: float, arms: str) -> Rollout:
    """The rollout the options ask for; a usage error for one out of its bounds."""
    try:
        chosen = RolloutMode(mode.upper())
    except ValueError:
        chosen = None
    if chosen is None or chosen is RolloutMode.END:
        output.fail(f"--mode {mode!r}: use shadow, canary or ab", exit_code=output.EXIT_USAGE)
    names = tuple(a.strip() for a in arms.split(",")) if arms else ()
    rollout = Rollout(chosen, share=share if chosen is not RolloutMode.SHADOW else 0.0, arms=names)
    refusal = rollout.refusal()
    if refusal:
        output.fail(refusal, exit_code=output.EXIT_USAGE)
    return rollout


rollout_app.command("backtest")(model_backtest_cmds.backtest)
