"""The status of a StreamflowApplication, computed from its Deployments. Pure.

The phase follows the pods, through the Deployments' own status:

* ``Running``: every streamlet's Deployment has rolled out and all its
  replicas are ready;
* ``Pending``: some streamlet is still waiting for replicas (a new
  application, a scale-up, a roll, a pod being replaced);
* ``Degraded``: a Deployment reports that it cannot progress
  (``ProgressDeadlineExceeded``) or cannot create pods (``ReplicaFailure``);
* ``Failed``: the operator could not apply the spec (it is invalid, or the
  API server refused a child); the message says what to fix.

Conditions keep their ``lastTransitionTime`` while their status holds, and a
condition not re-evaluated this time (topics are checked only when the spec
changes) is carried over, so writing the same status twice is a no-op for
the API server: an idle operator writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from streamflow.operator.targets.phases import Phase

__all__ = ["Condition", "build", "condition", "streamlet_counts"]


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str = ""

    def to_dict(self, *, since: str) -> dict[str, Any]:
        text = "Unknown" if self.status is None else str(self.status)
        return {
            "type": self.type,
            "status": text,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": since,
        }


def condition(status: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The condition ``kind`` of a status, if it has one."""
    for item in (status or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def streamlet_counts(deployment: Mapping[str, Any] | None, desired: int) -> dict[str, int]:
    status = (deployment or {}).get("status") or {}
    return {
        "desired": desired,
        "ready": int(status.get("readyReplicas") or 0),
        "updated": int(status.get("updatedReplicas") or 0),
        "available": int(status.get("availableReplicas") or 0),
    }


def _rolled_out(deployment: Mapping[str, Any] | None, desired: int) -> bool:
    if deployment is None:
        return desired == 0
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    return (
        int(status.get("observedGeneration") or 0) >= generation
        and int(spec.get("replicas") or 0) == desired
        and int(status.get("updatedReplicas") or 0) >= desired
        and int(status.get("readyReplicas") or 0) >= desired
        and int(status.get("replicas") or 0) <= desired
    )


def _stalled(deployment: Mapping[str, Any] | None) -> str | None:
    """Why a Deployment cannot make progress on its own, if it says so."""
    for item in ((deployment or {}).get("status") or {}).get("conditions") or []:
        stuck = item.get("type") == "Progressing" and item.get("reason") == (
            "ProgressDeadlineExceeded"
        )
        failing = item.get("type") == "ReplicaFailure" and item.get("status") == "True"
        if stuck or failing:
            return str(item.get("message") or item.get("reason"))
    return None


def build(
    *,
    generation: int,
    desired: Mapping[str, int],
    deployments: Mapping[str, Mapping[str, Any]],
    conditions: Iterable[Condition],
    previous: Mapping[str, Any] | None,
    now: str,
    failure: str | None = None,
) -> dict[str, Any]:
    """The whole status: phase, message, counts per streamlet, conditions, observedGeneration."""
    counts = {name: streamlet_counts(deployments.get(name), n) for name, n in desired.items()}
    done = [name for name, n in desired.items() if _rolled_out(deployments.get(name), n)]
    stalled = {n: why for n in desired if (why := _stalled(deployments.get(n))) and n not in done}
    waiting = [n for n in desired if n not in done]
    if failure is not None:
        phase, message = Phase.FAILED, failure
    elif stalled:
        phase = Phase.DEGRADED
        message = "; ".join(f"{name}: {why}" for name, why in sorted(stalled.items()))
    elif waiting:
        phase = Phase.PENDING
        message = "waiting for " + ", ".join(
            f"{n} ({counts[n]['ready']}/{counts[n]['desired']} ready)" for n in sorted(waiting)
        )
    else:
        phase, message = Phase.RUNNING, f"all {len(desired)} streamlets ready"
    ready = Condition(
        "Ready",
        phase == Phase.RUNNING,
        {Phase.RUNNING: "AllReplicasReady", Phase.PENDING: "Waiting"}.get(phase, phase.value),
        message,
    )
    return {
        "phase": phase.value,  # plain data, as the API server gives it back
        "message": message,
        "ready": f"{len(done)}/{len(desired)}",
        "observedGeneration": generation,
        "streamlets": counts,
        "conditions": merge_conditions(previous, [*conditions, ready], now=now),
    }


def merge_conditions(
    previous: Mapping[str, Any] | None, current: Iterable[Condition], *, now: str
) -> list[dict[str, Any]]:
    """``current`` over the previous conditions, keeping transition times that still hold."""
    merged: dict[str, dict[str, Any]] = {
        item["type"]: dict(item) for item in (previous or {}).get("conditions") or []
    }
    for item in current:
        before = merged.get(item.type)
        fresh = item.to_dict(since=now)
        if before is not None and before.get("status") == fresh["status"]:
            fresh["lastTransitionTime"] = before.get("lastTransitionTime", now)
        merged[item.type] = fresh
    return [merged[kind] for kind in sorted(merged)]
