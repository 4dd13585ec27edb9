"""The rollout on the web view: the newest decisions of the application's rollout controllers.

A rollout controller writes a ``RolloutDecision`` per verdict (see
:mod:`streamflow.streamlets.rollout.controller`); the page shows the newest rollout's
split, both versions' evidence over the current step, and its decision history. Pure,
like :mod:`.snapshot`, of which it is a part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DECISION", "HISTORY", "latest_rollout"]

DECISION = "streamflow.ml.RolloutDecision"
HISTORY = 12  # decisions shown, newest first


def latest_rollout(
    decisions: Mapping[str, Sequence[Mapping[str, Any]]], epoch: Any
) -> dict[str, Any] | None:
    """The newest rollout any controller decided on: where it stands, its evidence, and its
    decisions, newest first; None when no controller decided anything yet."""
    found = [(streamlet, d) for streamlet, mine in decisions.items() for d in mine]
    if not found:
        return None
    streamlet, newest = max(
        found, key=lambda pair: (pair[1]["candidate_version"], pair[1]["sequence"])
    )
    model, candidate = newest["model"], newest["candidate_version"]
    history = sorted(
        (
            d
            for s, d in found
            if s == streamlet and d["model"] == model and d["candidate_version"] == candidate
        ),
        key=lambda d: -d["sequence"],
    )
    return {
        "streamlet": streamlet,
        "model": model,
        "stable_version": newest["stable_version"],
        "candidate_version": candidate,
        "step": newest["step"],
        "steps": newest["steps"],
        "mode": newest["mode"],
        "share": newest["share"],
        "verdict": newest["verdict"],
        "reason": newest["reason"],
        "windows": newest["windows"],
        "ended": newest["verdict"] in ("PROMOTE", "ROLLBACK"),
        "arms": [
            _arm("stable", newest["stable_version"], newest["stable"]),
            _arm("candidate", candidate, newest["candidate"]),
        ],
        "interval": [newest["interval_low"], newest["interval_high"]]
        if newest.get("interval_low") is not None
        else None,
        "agreement": newest.get("agreement"),
        "distance": newest.get("distance"),
        "history": [
            {
                "sequence": d["sequence"],
                "verdict": d["verdict"],
                "step": d["step"],
                "mode": d["mode"],
                "share": d["share"],
                "reason": d["reason"],
                "time": epoch(d.get("time")),
            }
            for d in history[:HISTORY]
        ],
        "time": epoch(newest.get("time")),
    }


def _arm(role: str, version: int, evidence: Mapping[str, Any]) -> dict[str, Any]:
    labelled = evidence.get("labelled", 0)
    served = evidence.get("records", 0) + evidence.get("failures", 0)
    return {
        "role": role,
        "version": version,
        "records": evidence.get("records", 0),
        "labelled": labelled,
        "accuracy": evidence.get("correct", 0) / labelled if labelled else None,
        "error_rate": evidence.get("failures", 0) / served if served else None,
        "latency_p99_ms": evidence.get("latency_p99_ms"),
    }
