"""The rollout controller: a streamlet that judges a candidate by its evidence, and acts.

:class:`RolloutController` follows the serving streamlet's control topic (``model``: where
the rollout stands, as every replica folds it) and reads the evidence streamlet's windows
(``evidence``). It sums each version's evidence over the current step of the rollout's
policy, asks :func:`~streamflow.models.rollout_policy.decide`, and acts with control
records on the same topic, the way ``streamflow model rollout`` does:

* ADVANCE: the candidate again, meeting the next step's share (no load on a replica);
* PROMOTE: the candidate as the stable version, then its END;
* ROLLBACK: the candidate's END (its description says why).

A subclass that adds ``drift = ControlInlet("drift", "streamflow.ml.DriftReport")``
(the drift detector's alerts topic) rolls back on a drift alarm on the candidate's
outputs, if the policy says so (``rollback_on_drift``).

Every verdict is a ``RolloutDecision`` record on ``decisions`` with the evidence it rests
on: at once for one that acts, and once per new evidence window for a HOLD, so the
history says why it waited. The policy is the candidate's own (its ``rollout-policy``
parameter, set by ``streamflow model rollout start --policy FILE``), else the
blueprint's (``policy``). A rollout with neither is under manual control and left alone.

What the controller has summed, and what it has done, is durable state: a restarted
controller goes on where it was, and acts once per step (``acted``) even if it sees the
same evidence again; the step a rollout is at is read back from the control topic, so a
share changed by hand (``rollout set``) to one not in the policy stops the controller
from acting until the rollout is back on a step of its policy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from streamflow.api import params
from streamflow.api.ports import ControlInlet, Emit, Inlet, Outlet
from streamflow.api.state import Store
from streamflow.api.streamlet import Record, Streamlet
from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.rollout_policy import (
    POLICY_PARAMETER,
    Arm,
    Decision,
    Policy,
    PolicyError,
    Verdict,
    decide,
)
from streamflow.models.rollout_standing import (
    Standing,
    changed,
    control_key,
    ending,
    promotion,
)
from streamflow.streamlets.rollout import tally

__all__ = ["RolloutController", "policy_of"]

DECISION = "streamflow.ml.RolloutDecision"
_STATE = "rollout/"  # + the model's name: what the current step has summed, and done
_LATEST = "latest/"  # + the model's name: the latest evidence window seen


def policy_of(candidate: ModelDescriptor, default: Mapping[str, Any]) -> Policy | None:
    """The policy a candidate rolls out under: its own, else ``default``; None for neither.
    Raises PolicyError for one that cannot run."""
    raw = candidate.parameters.get(POLICY_PARAMETER)
    if raw is not None:
        try:
            return Policy.from_mapping(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise PolicyError(f"the candidate's {POLICY_PARAMETER} is not JSON: {exc}") from None
    return Policy.from_mapping(default) if default else None


def _check_policy(raw: dict[str, Any]) -> None:
    if raw:
        Policy.from_mapping(raw)


class RolloutController(Streamlet):
    """Advances, holds, promotes or rolls back a candidate by its evidence and a policy."""

    stateful = True

    evidence = Inlet("evidence", "streamflow.ml.RolloutEvidence", description="the windows")
    model = ControlInlet(
        "model", "streamflow.ml.ModelDescriptor", description="the serving control topic"
    )
    decisions = Outlet("decisions", DECISION, description="each verdict and why")
    control = Outlet(
        "control",
        "streamflow.ml.ModelDescriptor",
        description="the records that move the rollout (the serving control topic)",
    )

    policy = params.Mapping(
        check=_check_policy,
        default={},
        description="the rollout policy for candidates that bring none (steps, thresholds)",
    )
    name = params.Str(default="", description="the model controlled (default: every model)")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._standing: dict[str, Standing] = {}
        self._drifted: set[tuple[str, int]] = set()  # (model, version) a detector alarmed on

    # -- where the rollout stands: the control topic ---------------------------------------

    def on_control(self, inlet: str, record: Record) -> None:
        if inlet == "drift":  # a subclass's DriftReport inlet: the latest verdict per key
            report = record.value
            if report.get("source") == "outputs" and report.get("drifted"):
                # sticky: a later calm window of the stable version does not clear it
                self._drifted.add((report.get("model", ""), report.get("model_version", 0)))
            return None
        try:
            descriptor = ModelDescriptor.from_record(record.value)
        except ValueError:
            return None  # a kind this version does not know: the replicas refuse it too
        if self.name and descriptor.name != self.name:
            return None
        now = self._standing.get(descriptor.name) or Standing(descriptor.name)
        self._standing[descriptor.name] = now.after(descriptor)
        return None

    # -- the evidence ----------------------------------------------------------------------

    def process(self, record: Record) -> list[Emit]:
        value = record.value
        model = value["model"]
        store = self.state.of(record)
        before = store.get(_LATEST + model, -1)  # the latest window seen before this one
        if value["window"] > before:
            store.set(_LATEST + model, value["window"])
        now = self._standing.get(model)
        if now is None or now.candidate is None or now.stable is None:
            return []  # no rollout runs: nothing to judge
        candidate, stable = now.candidate, now.stable
        assert candidate.rollout is not None
        try:
            policy = policy_of(candidate, self.policy)
        except PolicyError as exc:
            return self._refused(store, now, f"its rollout policy is refused: {exc}")
        if policy is None:
            return []  # under manual control
        step = policy.step_of(candidate.rollout.mode, candidate.rollout.share)
        mine = self._summed(store, model, _identity(candidate), step, before)
        if mine["acted"] is not None:
            return []  # decided and acted: this step is over once the control topic says so
        place = f"{value['inlet']}/{value['partition']}/{value['window']}"
        if place in mine["seen"]:
            return []  # read again (a replayed batch): counted already
        mine["seen"].append(place)
        if value["window"] < mine["from_window"]:
            store.set(_STATE + model, mine)
            return []  # a window that ended before this step: the last step's share made it
        mine["last_window"] = max(mine["last_window"], value["window"])
        new_window = value["window"] not in mine["windows"]
        if new_window:
            mine["windows"].append(value["window"])
        for entry in value["versions"]:
            if entry["version"] == candidate.version:
                tally.merge(mine["candidate"], entry)
            elif entry["version"] == stable.version and not entry["shadow"]:
                tally.merge(mine["stable"], entry)
        mine["compared"] += value.get("compared", 0)
        mine["agreed"] += value.get("agreed", 0)
        if step is None:
            store.set(_STATE + model, mine)
            return []  # off the policy's steps (set by hand): no verdict of ours
        alarm = (model, candidate.version) in self._drifted
        arms = _arm(mine["stable"]), _arm(mine["candidate"], drift_alarm=alarm)
        decision = decide(policy, step, len(mine["windows"]), *arms)
        acts = decision.verdict is not Verdict.HOLD
        if not acts and not new_window:
            store.set(_STATE + model, mine)
            return []
        outputs = [self._decision(mine, now, policy, step, decision, drift_alarm=alarm)]
        if acts:
            mine["acted"] = decision.verdict.value
            outputs += self._act(policy, step, candidate, decision)
        store.set(_STATE + model, mine)
        return outputs

    def _summed(
        self, store: Store, model: str, rollout: list[int], step: int | None, before: int = -1
    ) -> dict[str, Any]:
        """What the current step has summed: started afresh for a new rollout (a candidate
        written again by ``rollout start``, even of the same version) or a new step, which
        counts only windows after the last one the step before it saw."""
        mine: dict[str, Any] | None = store.get(_STATE + model)
        if mine is None or mine["rollout"] != rollout:
            mine = {"rollout": rollout, "sequence": 0, "step": -2, "last_window": before}
        if mine["step"] != (step if step is not None else -1):
            mine.update(
                from_window=mine["last_window"] + 1,
                step=step if step is not None else -1,
                seen=[],
                windows=[],
                stable=tally.empty(),
                candidate=tally.empty(),
                compared=0,
                agreed=0,
                acted=None,
            )
        return mine

    def _refused(self, store: Store, now: Standing, why: str) -> list[Emit]:
        assert now.candidate is not None and now.stable is not None
        model = now.model
        mine = self._summed(store, model, _identity(now.candidate), None)
        if mine["acted"] is not None:
            return []
        mine["acted"] = Verdict.ROLLBACK.value
        decision = Decision(Verdict.ROLLBACK, why)
        out = [self._decision(mine, now, None, None, decision)]
        out.append(self._descriptor(ending(now.candidate, why=why)))
        store.set(_STATE + model, mine)
        return out

    # -- acting ----------------------------------------------------------------------------

    def _act(
        self, policy: Policy, step: int, candidate: ModelDescriptor, decision: Decision
    ) -> list[Emit]:
        verdict = decision.verdict
        if verdict is Verdict.ADVANCE:
            following = policy.steps[step + 1]
            rollout = Rollout(following.mode, share=following.share)
            return [self._descriptor(changed(candidate, rollout))]
        if verdict is Verdict.PROMOTE:
            return [self._descriptor(d) for d in promotion(candidate)]
        return [self._descriptor(ending(candidate, why=f"rolled back: {decision.reason}"))]

    def _descriptor(self, descriptor: ModelDescriptor) -> Emit:
        return self.control(descriptor.to_record(), key=control_key(descriptor))

    def _decision(
        self,
        mine: dict[str, Any],
        now: Standing,
        policy: Policy | None,
        step: int | None,
        decision: Decision,
        *,
        drift_alarm: bool = False,
    ) -> Emit:
        assert now.candidate is not None and now.candidate.rollout is not None
        assert now.stable is not None
        mine["sequence"] += 1
        rollout = now.candidate.rollout
        stable, candidate = mine.get("stable"), mine.get("candidate")
        compared = mine.get("compared", 0)
        interval = decision.interval
        value = {
            "model": now.model,
            "stable_version": now.stable.version,
            "candidate_version": now.candidate.version,
            "sequence": mine["sequence"],
            "step": step + 1 if step is not None else 0,
            "steps": len(policy.steps) if policy is not None else 0,
            "mode": rollout.mode.value.lower(),
            "share": 100.0 if rollout.mode is RolloutMode.SHADOW else rollout.share,
            "verdict": decision.verdict.value.upper(),
            "reason": decision.reason,
            "windows": len(mine.get("windows", [])),
            "stable": _arm_record(stable),
            "candidate": {**_arm_record(candidate), "drift_alarm": drift_alarm},
            "interval_low": interval[0] if interval else None,
            "interval_high": interval[1] if interval else None,
            "agreement": mine["agreed"] / compared if compared else None,
            "distance": tally.js_distance(stable["classes"], candidate["classes"])
            if stable and candidate
            else None,
            "time": int(time.time() * 1000),
        }
        tag = now.candidate.tag
        self.context.count(
            "rollout_decisions",
            description="a rollout controller's decisions, by candidate and verdict",
            labels={"model": tag, "verdict": decision.verdict.value},
        )
        self.context.set_gauge(
            "rollout_step",
            value["step"],
            description="the step of its policy a candidate's rollout is at (0: none of them)",
            labels={"model": tag},
        )
        return self.decisions(value, key=now.model)


def _identity(candidate: ModelDescriptor) -> list[int]:
    """One rollout of a candidate: its version and when its descriptor was made (the
    controller's own records keep it; ``rollout start`` makes a new one)."""
    return [candidate.version, int(candidate.created_at.timestamp() * 1000)]


def _arm(counters: Mapping[str, Any], *, drift_alarm: bool = False) -> Arm:
    return Arm(
        records=counters["records"],
        failures=counters["failures"],
        labelled=counters["labelled"],
        correct=counters["correct"],
        latency_p99_ms=tally.percentile(counters["latency"], 0.99),
        drift_alarm=drift_alarm,
    )


def _arm_record(counters: Mapping[str, Any] | None) -> dict[str, Any]:
    counters = counters or tally.empty()
    return {
        "records": counters["records"],
        "failures": counters["failures"],
        "labelled": counters["labelled"],
        "correct": counters["correct"],
        "latency_p99_ms": tally.percentile(counters["latency"], 0.99),
        "drift_alarm": False,
    }
