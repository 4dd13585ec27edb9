"""Waiting for a deployed application to converge, the way ``kubectl rollout status`` does.

``deploy``, ``scale`` and ``configure`` change what runs and then wait until
every replica is ready; ``undeploy`` waits until every replica has stopped.
The waits poll the target's status, the one view both targets share, and turn
it into a short line of progress ("scale 1→3: 2/3 ready (starting)") through
:mod:`streamflow.cli.progress`. The phrasing is pure (:func:`describe`), so it
is tested without a running application.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import NoReturn, TypeVar

from streamflow.cli import deploy_views as views
from streamflow.cli import output, progress
from streamflow.operator import targets

__all__ = [
    "Follow",
    "attempt",
    "describe",
    "fail_unsettled",
    "finish",
    "replicas_left",
    "run_with_progress",
    "settle",
]

T = TypeVar("T")

POLL_S = 0.5  # how often the target's status is read while waiting
_LISTED = 4  # with more streamlets than this, only those not ready yet are named


def describe(status: targets.AppStatus, *, previous: Mapping[str, int] | None = None) -> str:
    """How far an application got: ``classifier 1/2 ready (starting), sink 1/1 ready``.

    With ``previous`` (replicas before a scale), only the streamlets whose count
    changed are named, each with its change: ``classifier 2→4: 3/4 ready``.
    """
    before = previous or {}
    changed = [s for s in status.streamlets if before.get(s.name, s.desired) != s.desired]
    streamlets = changed or list(status.streamlets)
    parts = []
    for streamlet in streamlets:
        label = streamlet.name
        if streamlet in changed:
            label += f" {before[streamlet.name]}→{streamlet.desired}:"
        # replicas scaled away may still answer: never "3/1 ready"
        part = f"{label} {min(streamlet.ready, streamlet.desired)}/{streamlet.desired} ready"
        reason = _first_reason(streamlet)
        parts.append(f"{part} ({reason})" if reason else part)
    if len(parts) > _LISTED:
        waiting_for = [p for s, p in zip(streamlets, parts, strict=True) if not _ready(s)]
        ready = len(streamlets) - len(waiting_for)
        parts = [f"{ready}/{len(streamlets)} streamlets ready", *waiting_for]
    text = ", ".join(parts)
    if not status.up_to_date:
        text += "; the change is being applied"
    return text


def replicas_left(status: targets.AppStatus) -> int:
    return sum(s.running for s in status.streamlets)


def settle(
    target: targets.Target,
    name: str,
    *,
    verb: str,
    done: str,
    timeout: float,
    previous: Mapping[str, int] | None = None,
    since: float | None = None,
    machine_output: bool = False,
    quiet: bool = False,
) -> targets.AppStatus:
    """Poll until every replica is ready, the app failed, or ``timeout`` passed; the last status.

    ``verb`` names the wait (``deploying``), ``done`` its outcome (``deployed``),
    ``since`` when the command began, so the elapsed time counts the change too.
    When it did not settle, the caller shows the status and :func:`fail_unsettled`.
    """
    deadline = time.monotonic() + timeout
    found = attempt(lambda: target.status(name))
    with progress.waiting(
        f"{verb} {name}",
        detail=describe(found, previous=previous),
        since=since,
        machine_output=machine_output,
        quiet=quiet,
    ) as wait:
        while not (
            found.settled or found.phase == targets.Phase.FAILED or time.monotonic() > deadline
        ):
            time.sleep(POLL_S)  # polling the target's status
            found = attempt(lambda: target.status(name))
            wait.update(describe(found, previous=previous))
        if found.settled:
            ready = sum(s.ready for s in found.streamlets)
            wait.done(f"{done} {name}: {output.plural(ready, 'replica')} ready")
    return found


@dataclasses.dataclass(frozen=True)
class Follow:
    """How a changing command follows its change: the flags they all share.

    ``since`` is when the command began, so the elapsed time counts the change too.
    """

    wait: bool
    timeout: float
    fmt: str  # table, json or yaml
    quiet: bool
    since: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def machine_output(self) -> bool:
        return self.fmt != "table"


def finish(
    target: targets.Target,
    name: str,
    words: tuple[str, str],
    follow: Follow,
    *,
    previous: Mapping[str, int] | None = None,
) -> None:
    """After a change: wait until every replica is ready, show the status; exit 1 if not.

    ``words``: the wait and its outcome (``deploying``, ``deployed``). With
    ``--no-wait``, json or yaml still prints the status as it is now, so a
    script always gets a document on stdout.
    """
    if not follow.wait:
        if follow.machine_output:
            output.print_data(attempt(lambda: target.status(name)).to_dict(), fmt=follow.fmt)
        return
    verb, done = words
    found = settle(
        target,
        name,
        verb=verb,
        done=done,
        timeout=follow.timeout,
        previous=previous,
        since=follow.since,
        machine_output=follow.machine_output,
        quiet=follow.quiet,
    )
    if follow.machine_output:
        output.print_data(found.to_dict(), fmt=follow.fmt)
    else:
        views.print_status(found)
    if not found.settled:
        fail_unsettled(found, timeout=follow.timeout)


def attempt(call: Callable[[], T]) -> T:
    """``call()``, with a TargetError turned into the user's message and exit 1."""
    try:
        return call()
    except targets.TargetError as exc:
        message = exc.message
        if exc.problems:
            message += ":\n" + "\n".join(f"  - {problem}" for problem in exc.problems)
        output.fail(message, hint=exc.hint)


def fail_unsettled(status: targets.AppStatus, *, timeout: float) -> NoReturn:
    """The error of a wait that ended without every replica ready (exit 1)."""
    late = status.not_ready()
    if status.phase == targets.Phase.FAILED:
        message = f"{status.name} failed: {status.message}"
        message += f" (not ready: {', '.join(late)})" if late else ""
    else:
        message = f"{status.name} is not ready after {timeout:.0f}s: "
        message += ", ".join(late or [status.message])
    output.fail(
        message,
        hint=f"see `streamflow status {status.name}` and `streamflow logs {status.name} STREAMLET`",
    )


def run_with_progress(
    call: Callable[[], T],
    *,
    wait: progress.Waiting,
    poll: Callable[[], str | None],
) -> T:
    """``call()`` in a worker thread while ``poll()`` feeds ``wait``; its result or its error.

    For target calls that block until they are done (``undeploy`` stops every
    replica before it returns): the user sees the count go down meanwhile. A
    ``poll`` that fails or returns None leaves the last detail standing.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the calling thread, raised there
            error.append(exc)

    worker = threading.Thread(target=work, name="streamflow-cli-wait", daemon=True)
    worker.start()
    while worker.is_alive():
        try:
            detail = poll()
        except Exception:  # progress is only a view: a status read that fails mid-change
            detail = None  # (the app half removed already) must never stop the call itself
        if detail is not None:
            wait.update(detail)
        worker.join(POLL_S)
    if error:
        raise error[0]
    return result[0]


def _ready(streamlet: targets.StreamletStatus) -> bool:
    return streamlet.ready == streamlet.desired == streamlet.running


def _first_reason(streamlet: targets.StreamletStatus) -> str:
    """Why the first replica that is not ready is not: its own words, else what is seen."""
    for replica in streamlet.replicas:
        if replica.index < streamlet.desired and not replica.ready:
            if replica.reasons:
                return replica.reasons[0]
            return "starting" if replica.running else "not running"
    if streamlet.running > streamlet.desired:
        return f"{streamlet.running - streamlet.desired} stopping"
    if len(streamlet.replicas) < streamlet.desired:
        return "starting"
    return ""
