"""Who sets an autoscaled streamlet's replicas on a cluster, and how many the operator wants. Pure.

A streamlet with ``autoscale:`` is scaled by one of two hands, never both:

* **the operator** (the default): its autoscaler measures the input's lag,
  runs :func:`streamflow.operator.autoscale.decide`, and records the decision
  in the resource's ``status.autoscale.<streamlet>``. The reconcile then
  wants *that* count, not ``spec.replicas`` (which, for an autoscaled
  streamlet, is only the count to start with), so the two never fight and
  an operator restart keeps the last decision;
* **KEDA**, when the streamlet says ``keda: true`` and the cluster serves
  ``scaledobjects.keda.sh``: a ScaledObject's HPA owns the Deployment's
  replicas, and the reconcile wants whatever the Deployment has. Without
  KEDA the operator falls back to scaling the streamlet itself, and the
  ``Autoscaling`` condition says so.

The recorded entries are camelCase, like the rest of a Kubernetes status;
:func:`autoscale_status` turns one back into the CLI's
:class:`~streamflow.operator.targets.AutoscaleStatus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from streamflow.blueprint.model import Application, AutoscaleSpec
from streamflow.operator import targets
from streamflow.operator.autoscale import Decision
from streamflow.operator.kubernetes import names
from streamflow.operator.kubernetes.status import Condition

__all__ = [
    "AUTOSCALING",
    "KEDA",
    "OPERATOR",
    "autoscale_status",
    "condition",
    "decision_entry",
    "desired_replicas",
    "entries",
    "input_topics",
    "keda_entry",
    "keda_recorded",
    "recorded",
    "who_scales",
]

OPERATOR = "operator"
KEDA = "keda"
AUTOSCALING = "Autoscaling"


def who_scales(app: Application, *, keda_installed: bool) -> dict[str, str]:
    """Each autoscaled streamlet and who scales it: ``operator`` or ``keda``."""
    return {
        name: KEDA if spec.autoscale.keda and keda_installed else OPERATOR
        for name, spec in app.streamlets.items()
        if spec.autoscale is not None
    }


def desired_replicas(
    app: Application,
    streamlet: str,
    *,
    scaler: str | None,
    entry: Mapping[str, Any] | None,
    observed: int | None,
) -> int:
    """The replicas a reconcile wants for ``streamlet``.

    ``entry``: its ``status.autoscale`` record; ``observed``: its Deployment's
    replicas, None before it exists. Bounds changed in the spec apply at once.
    """
    spec = app.streamlets[streamlet]
    auto = spec.autoscale
    if auto is None or scaler is None:
        return spec.replicas
    if scaler == KEDA:  # the HPA's to set; a new Deployment starts where the spec says
        return observed if observed is not None else _bounded(spec.replicas, auto)
    decided = entry.get("replicas") if entry and entry.get("by") == OPERATOR else None
    base = decided if isinstance(decided, int) else observed
    return _bounded(spec.replicas if base is None else base, auto)


def _bounded(replicas: int, auto: AutoscaleSpec) -> int:
    return min(max(replicas, auto.min), auto.max)


def input_topics(app: Application, streamlet: str) -> list[str]:
    """The topics of the streamlet's data inlets: what its lag is measured on (both targets')."""
    return targets.data_inputs(app, streamlet)


def condition(app: Application, scalers: Mapping[str, str]) -> Condition | None:
    """The ``Autoscaling`` condition; None when no streamlet is autoscaled."""
    if not scalers:
        return None
    ours = sorted(s for s, by in scalers.items() if by == OPERATOR)
    theirs = sorted(s for s, by in scalers.items() if by == KEDA)
    missing = [s for s in ours if (auto := app.streamlets[s].autoscale) and auto.keda]
    if missing:
        return Condition(
            AUTOSCALING,
            False,
            "KedaMissing",
            f"KEDA is not installed (the cluster serves no scaledobjects.keda.sh); "
            f"the operator scales {', '.join(missing)} itself",
        )
    parts = []
    if theirs:
        parts.append(f"KEDA scales {', '.join(theirs)} through ScaledObjects")
    if ours:
        parts.append(f"the operator scales {', '.join(ours)} by their input's lag")
    return Condition(AUTOSCALING, True, "KEDA" if theirs else "Operator", "; ".join(parts))


def recorded(status: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The ``status.autoscale`` entries, by streamlet."""
    found = (status or {}).get("autoscale") or {}
    return {str(s): dict(e) for s, e in found.items() if isinstance(e, Mapping)}


def decision_entry(
    decision: Decision, previous: Mapping[str, Any] | None, *, now: str
) -> dict[str, Any]:
    """What the operator records of a decision; the time and count move only on a change."""
    before = dict(previous or {}) if (previous or {}).get("by") == OPERATOR else {}
    entry: dict[str, Any] = {
        "by": OPERATOR,
        "replicas": decision.replicas,
        "wanted": decision.wanted,
        "reason": decision.reason,
        "lag": decision.lag,
        "decisions": int(before.get("decisions") or 0) + int(decision.changed),
    }
    if decision.rate_in is not None:
        entry["rateIn"] = round(decision.rate_in, 3)
    decided_at = now if decision.changed else before.get("decidedAt")
    if decided_at:
        entry["decidedAt"] = decided_at
    return entry


def keda_recorded(status: Mapping[str, Any] | None) -> bool:
    """Whether KEDA scaled some streamlet when the status was written (a ScaledObject to drop)."""
    return any(e.get("by") == KEDA for e in recorded(status).values())


def entries(
    app_resource: str,
    scalers: Mapping[str, str],
    status: Mapping[str, Any] | None,
    deployments: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """``status.autoscale``: the autoscaler's records kept, KEDA's read off the Deployments."""
    before = recorded(status)
    out = {}
    for streamlet, by in scalers.items():
        if by == KEDA:
            found = (deployments.get(streamlet) or {}).get("spec") or {}
            name = names.child_name(app_resource, streamlet)
            out[streamlet] = keda_entry(name, int(found.get("replicas") or 0))
        elif (before.get(streamlet) or {}).get("by") == OPERATOR:
            out[streamlet] = before[streamlet]
    return out


def keda_entry(scaled_object: str, replicas: int) -> dict[str, Any]:
    """What the operator records of a streamlet KEDA scales: what its HPA set, and by what."""
    return {
        "by": KEDA,
        "replicas": replicas,
        "reason": f"KEDA scales it through ScaledObject {scaled_object}",
    }


def autoscale_status(
    auto: AutoscaleSpec, entry: Mapping[str, Any] | None, *, replicas: int
) -> targets.AutoscaleStatus:
    """The CLI's view of a record; ``replicas`` stands in before the first decision."""
    if not entry:
        return targets.AutoscaleStatus(
            min=auto.min,
            max=auto.max,
            target_lag=auto.target_lag,
            replicas=replicas,
            reason="no decision yet: the operator has not measured the input's lag",
        )
    rate = entry.get("rateIn")
    lag = entry.get("lag")
    return targets.AutoscaleStatus(
        min=auto.min,
        max=auto.max,
        target_lag=auto.target_lag,
        replicas=int(entry.get("replicas") or 0),
        reason=str(entry.get("reason") or ""),
        decided_at=_epoch(entry.get("decidedAt")),
        lag=int(lag) if isinstance(lag, int | float) else None,
        rate=float(rate) if isinstance(rate, int | float) else None,
        decisions=int(entry.get("decisions") or 0),
    )


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
