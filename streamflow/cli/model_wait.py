"""Showing the wait for every replica to serve a pushed model, and what each one said.

The wait itself is :func:`streamflow.operator.model_versions.await_statuses`;
this module draws it: how many serve so far and what the others said
(:mod:`streamflow.cli.progress`), and at the end an error naming each replica
that does not serve the version, and why, or that never answered.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from rich.table import Table
from rich.text import Text

from streamflow.blueprint.model import Application
from streamflow.cli import output, progress
from streamflow.models.kinds import ModelState
from streamflow.operator import model_versions as versions

__all__ = ["Awaited", "await_status", "check_served", "decision_line", "print_status_table"]


@dataclasses.dataclass(frozen=True)
class Awaited:
    """What ``push`` waits for: ``streamlet`` to serve ``model:version`` within ``timeout``
    (or to reach another ``goal``: a rollout's candidate that leaves is ``retired``)."""

    streamlet: str
    model: str
    version: int
    timeout: float
    machine_output: bool = False
    quiet: bool = False
    goal: ModelState = ModelState.SERVING

    @property
    def doing(self) -> str:
        """The goal as a verb: ``serve``, ``retire``."""
        return "serve" if self.goal is ModelState.SERVING else "retire"


def await_status(
    channel: versions.ModelChannel,
    pushed: versions.Pushed,
    awaited: Awaited,
    *,
    replicas: Callable[[], int],
) -> dict[str, dict[str, Any]]:
    """The final status of each replica for the version, with the wait shown meanwhile.

    ``replicas``: how many run now (asked again while waiting, as it may change).
    """
    count = replicas()
    goal = awaited.goal
    with progress.waiting(
        f"waiting for {awaited.streamlet} to {awaited.doing} {awaited.model}:{awaited.version}",
        detail=_served({}, count, goal),
        separator=" — ",
        machine_output=awaited.machine_output,
        quiet=awaited.quiet,
    ) as wait:
        outcome = versions.await_statuses(
            channel,
            pushed,
            timeout=awaited.timeout,
            replicas=replicas,
            count=count,
            progress=lambda states, count: wait.update(_served(states, count, goal)),
        )
        if outcome.replicas == 0:
            wait.done(
                f"{awaited.streamlet} runs no replica now (scaled to zero); each one it"
                f" starts loads {awaited.model}:{awaited.version}"
            )
        elif outcome.reached(goal):
            done = "serves" if goal is ModelState.SERVING else f"has {goal}"
            wait.done(
                f"{awaited.streamlet} {done} {awaited.model}:{awaited.version}"
                f" on {outcome.replicas}/{outcome.replicas} replicas"
            )
    return outcome.statuses


def _served(states: Mapping[str, str], replicas: int, goal: ModelState = ModelState.SERVING) -> str:
    """``1/2 replicas, classifier-1 loading``: how many serve, and what the others said."""
    serving = sum(state == goal for state in states.values())
    others = [f"{r} {state}" for r, state in sorted(states.items()) if state != goal]
    return ", ".join([f"{serving}/{replicas} replicas", *others])


def check_served(
    statuses: dict[str, dict[str, Any]], awaited: Awaited, app: Application, *, role: str = ""
) -> None:
    """Exit 1, naming each replica that does not serve the version, and why. A candidate
    every replica retired already (a rollout controller judged it in the meantime) was
    started: said, not failed."""
    missing = versions.unserved(statuses, awaited.goal)
    ended = [s for s in statuses.values() if s.get("state") == str(ModelState.RETIRED)]
    if role == "candidate" and missing and statuses and len(ended) == len(statuses):
        output.console().print(
            f"{awaited.model}:{awaited.version} started, and its rollout has ended already "
            f"({ended[0].get('message', '')}): see `streamflow model rollout status "
            f"{app.name} {awaited.streamlet}`"
        )
        return
    if missing:
        done = "served" if awaited.goal is ModelState.SERVING else str(awaited.goal)
        output.fail(
            f"{awaited.model}:{awaited.version} is not {done} by every replica of "
            f"{awaited.streamlet}: " + ", ".join(missing),
            hint=f"see `streamflow model status {app.name} {awaited.streamlet}`"
            f" and `streamflow logs {app.name} {awaited.streamlet}`",
        )


def print_status_table(statuses: dict[str, dict[str, Any]]) -> None:
    table = Table("replica", "model", "version", "state", "message", "time")
    colours = {
        ModelState.SERVING: "green",
        ModelState.FAILED: "red",
        ModelState.REJECTED: "red",
        ModelState.LOADING: "yellow",
        ModelState.RETIRED: "blue",
    }
    for replica, s in sorted(statuses.items()):
        state = s["state"]
        when = s["time"].strftime("%H:%M:%S") if isinstance(s["time"], dt.datetime) else "-"
        message = s["message"] + (f" (then {s['last_event']})" if s.get("last_event") else "")
        table.add_row(
            replica,
            s["model"],
            str(s["version"]),
            f"[{colours.get(state, 'white')}]{state}[/]",
            message,
            when,
        )
    output.console().print(table)


def decision_line(decision: Mapping[str, Any]) -> Text:
    """``last decision on wine:2: ADVANCE at step 1 of 3 (shadow), 2 windows: why``."""
    where = f"step {decision['step']} of {decision['steps']}" if decision["step"] else "no step"
    style = {"ROLLBACK": "red", "PROMOTE": "green", "ADVANCE": "cyan"}.get(
        decision["verdict"], "yellow"
    )
    return Text.assemble(
        f"last decision on {decision['model']}:{decision['candidate_version']}: ",
        (decision["verdict"], f"bold {style}"),
        f" at {where} ({decision['mode']}), {decision['windows']} windows: {decision['reason']}",
    )
