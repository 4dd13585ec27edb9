"""``undeploy`` waits until the application is gone, and says what holds it when it is not.

On Kubernetes, deleting the resource only asks: the resource goes once no
finalizer holds it, and its Deployments and pods go after it, through the
garbage collector. A command that printed "undeployed" at that point would
leave a script to start the next deploy while the old pods still consume.
So ``undeploy`` polls what is left (a target that can tell, through
``remains``) with the same progress line as every other wait, until nothing
is, or ``--timeout`` passes: then it names the finalizers and the children
still there, and exits 1. ``--no-wait`` returns once the deletion is asked.

The local target needs none of this: its ``undeploy`` returns once every
replica process has exited.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Protocol, runtime_checkable

import typer

from streamflow.cli import output, progress, rollout
from streamflow.operator import targets

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: not for every command
    from streamflow.operator.kubernetes.leftovers import Leftovers

__all__ = ["Lingering", "UndeployTimeoutOpt", "UndeployWaitOpt", "wait_gone"]

UndeployWaitOpt = Annotated[
    bool,
    typer.Option(
        "--wait/--no-wait",
        help="Wait until the application and everything it ran are gone.",
    ),
]
UndeployTimeoutOpt = Annotated[
    str, typer.Option("--timeout", help="How long to wait (e.g. 90s, 5m).")
]


@runtime_checkable
class Lingering(Protocol):
    """A target whose applications outlive their deletion for a while (Kubernetes)."""

    def remains(self, name: str) -> Leftovers: ...


def wait_gone(
    target: targets.Target,
    name: str,
    *,
    wait: progress.Waiting,
    timeout: float,
    poll_s: float = rollout.POLL_S,
) -> None:
    """Poll until nothing of ``name`` is left; exit 1 naming what is, after ``timeout``."""
    if not isinstance(target, Lingering):
        return
    deadline = time.monotonic() + timeout
    left = rollout.attempt(lambda: target.remains(name))
    while not left.gone:
        wait.update(left.progress())
        # Only what it may not list is left: waiting longer cannot tell more.
        blind = not left.present and not left.children and not left.pods
        if blind or time.monotonic() > deadline:
            output.fail(
                (f"{name} may not be gone" if blind else f"{name} is not gone after {timeout:.0f}s")
                + ":\n"
                + "\n".join(f"  - {problem}" for problem in left.problems()),
                hint="`kubectl describe sfapp` and `kubectl get events` say more",
            )
        time.sleep(poll_s)  # polling the API server
        left = rollout.attempt(lambda: target.remains(name))
