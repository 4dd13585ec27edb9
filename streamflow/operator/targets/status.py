"""What a target says about an application: the status types, and its phase.

Both backends answer ``status`` with these frozen dataclasses, so the CLI and
the web view render one shape whatever the target. :func:`phase_of` is the
local target's reading of its replicas; the Kubernetes operator computes its
phase from Deployments instead (``kubernetes/status.py``), in the same
:class:`~streamflow.operator.targets.phases.Phase` words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from streamflow.operator.targets.phases import Phase
from streamflow.operator.targets.writer_schemas import WriterSchemaDeadLetters

__all__ = ["AppStatus", "AutoscaleStatus", "ReplicaStatus", "StreamletStatus", "phase_of"]


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    streamlet: str
    index: int
    running: bool
    ready: bool
    restarts: int = 0
    pid: int | None = None  # local target
    pod: str | None = None  # kubernetes target
    endpoint: str | None = None  # the health server's base URL
    reasons: tuple[str, ...] = ()  # why it is not ready
    lag: int | None = None
    model: str | None = None
    last_exit: int | None = None
    last_exit_reason: str = ""  # "killed: not live (stuck for 65s in ...)", "exited with code 1"
    live: bool | None = None  # None: unknown (not answering, or the target cannot tell)
    not_live: str = ""  # why it is not live, while it is not


@dataclass(frozen=True)
class AutoscaleStatus:
    """The autoscaler's bounds and its last decision for one streamlet (``autoscale:``)."""

    min: int
    max: int
    target_lag: int
    replicas: int  # what it last decided
    reason: str  # why, in words: "lag 48210 > 5000 per replica x 2", "stable", ...
    decided_at: float | None = None  # epoch seconds of the last change, None before the first
    lag: int | None = None  # the lag it decided on
    rate: float | None = None  # records/s into the input topics, when known
    decisions: int = 0  # changes of the replica count since the target started applying it


@dataclass(frozen=True)
class StreamletStatus:
    name: str
    desired: int
    ready: int
    running: int
    restarts: int = 0
    lag: int | None = None
    model: str | None = None
    replicas: tuple[ReplicaStatus, ...] = ()
    autoscale: AutoscaleStatus | None = None
    # dead letters of records whose writer schema the streamlet cannot read, by schema
    # (summed over the replicas that answered; a target that cannot ask them says none)
    writer_schemas: tuple[WriterSchemaDeadLetters, ...] = ()
    # a serving streamlet's rollout: its controllers' last decision, as the
    # RolloutDecision record's fields (a target that does not read them says none)
    last_decision: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class AppStatus:
    """An application as its target sees it. ``up_to_date``: the latest spec was acted on."""

    name: str
    target: str
    phase: Phase
    message: str
    up_to_date: bool
    streamlets: tuple[StreamletStatus, ...]
    kafka: str | None = None

    @property
    def settled(self) -> bool:
        """Every streamlet runs its desired replicas, all ready, per the latest spec."""
        return self.up_to_date and all(
            s.ready == s.desired and s.running == s.desired for s in self.streamlets
        )

    def not_ready(self) -> list[str]:
        """``name (reason)`` of each replica that runs but is not ready, or is missing."""
        out = []
        for streamlet in self.streamlets:
            for replica in streamlet.replicas:
                if not replica.ready:
                    reason = "; ".join(replica.reasons) or (
                        "not running" if not replica.running else "not answering"
                    )
                    out.append(f"{replica.name} ({reason})")
            missing = streamlet.desired - len(streamlet.replicas)
            if missing > 0:
                out.append(f"{missing} replica(s) of {streamlet.name} (not started)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the phase as its string, so any serializer (not only JSON) takes it."""
        return {**asdict(self), "phase": str(self.phase)}


def phase_of(
    streamlets: Sequence[StreamletStatus], *, up_to_date: bool, failure: str = ""
) -> tuple[Phase, str]:
    """``(phase, message)``: Failed, Running, Degraded (replicas down) or Pending (starting)."""
    if failure:
        return Phase.FAILED, failure
    stuck = [f"{r.name} ({r.not_live})" for s in streamlets for r in s.replicas if r.live is False]
    if stuck:
        return Phase.DEGRADED, f"not live, to be restarted: {', '.join(stuck)}"
    if up_to_date and all(s.ready == s.desired == s.running for s in streamlets):
        return Phase.RUNNING, ""
    down = [
        r.name
        for s in streamlets
        for r in s.replicas
        if not r.running or (not r.ready and r.last_exit is not None)
    ]
    if down:
        return Phase.DEGRADED, f"not running or restarting: {', '.join(down)}"
    waiting = [f"{s.name} {s.ready}/{s.desired}" for s in streamlets if s.ready != s.desired]
    if not up_to_date:
        return Phase.PENDING, "the latest change is being applied"
    return Phase.PENDING, f"waiting for replicas to become ready: {', '.join(waiting)}"
