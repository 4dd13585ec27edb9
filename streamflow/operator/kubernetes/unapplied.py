"""The status of an application whose spec was not applied: failed, or being verified. Pure.

The reconciler applies a spec only once it is read, admitted and verified.
Short of that, nothing is created or changed, and the status says why, here:

* **failed** (:func:`failed`): the spec cannot be read, admission refused it,
  the API server refused a child, or it does not verify: phase ``Failed``,
  ``Reconciled`` False with the reason, and a Warning event;
* **not verified** (:func:`unverified`): the verifier found problems
  (``Verified`` False, ``ProblemsFound``, each problem with its place in the
  spec) or could not run (``Verified`` Unknown, ``VerifierFailed``: a child
  that crashed, a Job whose image cannot be pulled); both fail the application;
* **verifying** (:func:`verifying`): the verifier's Job runs: ``Verified`` and
  ``Reconciled`` Unknown with reason ``Verifying``, phase ``Pending``. The
  counts of a running application's replicas stay as they were: its pods run on.

Each returns the whole new status, and leaves writing it (only if it changed)
and the event to the reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamflow.operator.kubernetes import status
from streamflow.operator.kubernetes.verify import Verdict, describe_problems
from streamflow.operator.targets.phases import Phase

__all__ = [
    "RECONCILED",
    "VERIFIED",
    "VERIFYING",
    "Refusal",
    "failed",
    "is_verifying",
    "unverified",
    "verified",
    "verifying",
]

VERIFIED = "Verified"
VERIFYING = "Verifying"
RECONCILED = "Reconciled"


@dataclass(frozen=True)
class Refusal:
    """Why a spec is not applied: the Reconciled reason, the message, and more conditions."""

    reason: str
    message: str
    also: tuple[status.Condition, ...] = ()
    event: str = "Failed"  # the Warning event's reason


def failed(
    body: Mapping[str, Any], generation: int, refusal: Refusal, *, now: str
) -> dict[str, Any]:
    """Nothing was applied: phase Failed, and why."""
    conditions = [status.Condition(RECONCILED, False, refusal.reason, refusal.message)]
    return _held(body, generation, Phase.FAILED, refusal.message, [*conditions, *refusal.also], now)


def unverified(verdict: Verdict) -> Refusal:
    """The refusal of a spec that does not verify, or that could not be verified."""
    if verdict.error is not None:
        return Refusal(
            "VerifierFailed",
            f"the application could not be verified: {verdict.error}",
            (status.Condition(VERIFIED, None, "VerifierFailed", verdict.error),),
            event="VerifierFailed",
        )
    listed = describe_problems(verdict.errors)
    count = len(verdict.errors)
    message = f"the application does not verify ({count} problem{'s' * (count != 1)}): "
    return Refusal(
        "NotVerified",
        message + listed,
        (status.Condition(VERIFIED, False, "ProblemsFound", listed),),
        event="VerificationFailed",
    )


def verifying(body: Mapping[str, Any], generation: int, what: str, *, now: str) -> dict[str, Any]:
    """The verifier's Job runs: nothing is applied until it answers."""
    message = f"verifying the spec: {what}"
    conditions = [
        status.Condition(RECONCILED, None, VERIFYING, "waiting for the verification"),
        status.Condition(VERIFIED, None, VERIFYING, what),
    ]
    return _held(body, generation, Phase.PENDING, message, conditions, now)


def is_verifying(previous: Mapping[str, Any] | None) -> bool:
    """Whether a status already says the spec is being verified (its event was posted)."""
    return (status.condition(previous, VERIFIED) or {}).get("reason") == VERIFYING


def verified(problems: Sequence[Mapping[str, Any]]) -> status.Condition:
    """Verified, with the warnings the verifier had, if any (they do not fail the spec)."""
    return status.Condition(VERIFIED, True, "Verified", describe_problems(problems))


def _held(
    body: Mapping[str, Any],
    generation: int,
    phase: Phase,
    message: str,
    conditions: Sequence[status.Condition],
    now: str,
) -> dict[str, Any]:
    previous = body.get("status") or {}
    new = {
        **previous,
        "phase": phase.value,
        "message": message,
        "observedGeneration": generation,
        "conditions": status.merge_conditions(previous, conditions, now=now),
    }
    new.setdefault("ready", f"0/{len((body.get('spec') or {}).get('streamlets') or {})}")
    return new
