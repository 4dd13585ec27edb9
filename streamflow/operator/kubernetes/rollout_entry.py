"""``status.rollouts.<streamlet>``: what the entry says, and how it is shown. Pure.

:mod:`.rollout_status` reads the topics and writes the entries; the reconcile carries
them over and the Kubernetes target shows them in ``streamflow status``: this module is
what those three share, so the CLI does not import the reader to show its output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.rollout_standing import Standing

__all__ = ["FIELD", "MAX_TEXT", "entry", "merge_patch", "patch", "shown"]

FIELD = "rollouts"


def entry(now: Standing, decision: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``status.rollouts.<streamlet>`` from where the rollout stands and the newest decision."""
    if now.stable is None and now.candidate is None:
        return None
    out: dict[str, Any] = {"model": _bounded(now.model)}
    if now.stable is not None:
        out["stable"] = now.stable.version
    if now.candidate is not None and now.candidate.rollout is not None:
        rollout = now.candidate.rollout
        out["candidate"] = now.candidate.version
        out["mode"] = rollout.mode.value.lower()
        if rollout.splits and (share := _finite(rollout.share)) is not None:
            out["share"] = share
        if rollout.arms:
            out["arms"] = [_bounded(arm) for arm in rollout.arms]
    if decision is not None:
        out["lastDecision"] = {
            "candidate": decision["candidate_version"],
            "sequence": decision["sequence"],
            "verdict": decision["verdict"],
            "step": decision["step"],
            "steps": decision["steps"],
            "mode": decision["mode"],
            "reason": _bounded(decision["reason"]),
            "windows": decision["windows"],
        }
        if (share := _finite(decision["share"])) is not None:
            out["lastDecision"]["share"] = share
        decided = _time(decision.get("time"))
        if decided is not None:
            out["lastDecision"]["decidedAt"] = decided
    return out


def shown(entry: Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any] | None]:
    """What ``streamflow status`` shows of an entry: the model column as a replica says it
    (``wine:1 + candidate wine:2 (canary 25% of the keys)``), and the last decision as a
    ``RolloutDecision`` record's fields."""
    if not entry or "model" not in entry:
        return None, None
    model = str(entry["model"])
    said = f"{model}:{entry['stable']}" if "stable" in entry else None
    if "candidate" in entry and "mode" in entry:
        mode = RolloutMode(str(entry["mode"]).upper())
        plan = Rollout(mode, float(entry.get("share") or 0.0), tuple(entry.get("arms") or ()))
        candidate = f"candidate {model}:{entry['candidate']} ({plan.describe()})"
        said = f"{said} + {candidate}" if said else candidate
    last = entry.get("lastDecision")
    decision = None
    if isinstance(last, Mapping):
        decision = {
            "model": model,
            "candidate_version": last.get("candidate"),
            "verdict": last.get("verdict"),
            "step": last.get("step", 0),
            "steps": last.get("steps", 0),
            "mode": last.get("mode"),
            "windows": last.get("windows", 0),
            "reason": last.get("reason", ""),
        }
    return said, decision


def merge_patch(before: Any, after: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns ``before`` into ``after``: what ``after`` lacks is
    written as null (a merge patch keeps every key it does not name)."""
    old = before if isinstance(before, Mapping) else {}
    patch: dict[str, Any] = {key: None for key in old if key not in after}
    for key, value in after.items():
        nested = isinstance(value, Mapping) and isinstance(old.get(key), Mapping)
        patch[key] = merge_patch(old[key], value) if nested else value
    return patch


#: The longest text of a record the status carries: a record is the writer's to fill, and
#: the status object goes to every watcher of the resource.
MAX_TEXT = 1024


def _bounded(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _finite(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _time(value: Any) -> str | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return None


def patch(
    body: Mapping[str, Any], found: Mapping[str, dict[str, Any] | None], *, keep: set[str]
) -> dict[str, Any]:
    """The merge patch of ``status.rollouts`` from what it says in ``body`` to ``found``;
    a streamlet not in ``keep`` leaves it, one not read this time stays as it was."""
    before = dict((body.get("status") or {}).get(FIELD) or {})
    patch: dict[str, Any] = {s: None for s in before if s not in keep}
    for streamlet, now in found.items():
        if now is None and streamlet in before:
            patch[streamlet] = None
        elif now is not None and before.get(streamlet) != now:
            patch[streamlet] = merge_patch(before.get(streamlet), now)
    return patch
