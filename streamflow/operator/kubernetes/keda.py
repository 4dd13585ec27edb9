"""KEDA's ScaledObject for a streamlet that asks for it (``autoscale: {keda: true}``).

:func:`scaled_object` is pure: the body the operator writes, unit-tested
without a cluster. It carries the blueprint's ``autoscale:`` over field by
field, so KEDA scales by the same numbers the operator's own policy would:

* ``minReplicaCount``/``maxReplicaCount`` from ``min``/``max``;
* one ``kafka`` trigger per data inlet topic, on the streamlet's consumer
  group, with ``lagThreshold`` = ``target_lag`` (KEDA's HPA takes the largest
  count the triggers ask for) and ``offsetResetPolicy: earliest``, as the
  replicas start (a group that never committed lags by the whole topic);
* the HPA's stabilization windows from ``scale_up_after``/``scale_down_after``
  (capped at the hour the HPA accepts), and ``cooldownPeriod``, which KEDA
  applies to scaling down to zero, from ``scale_down_after`` too.

The ScaledObject is owned by the application, so it goes with it. Kafka
credentials are not passed on (KEDA would need a TriggerAuthentication):
with a Kafka that needs them, the operator's own autoscaler is the one to
use, as operator/README.md says.

:class:`Probe` answers "does this cluster serve ScaledObjects?", by API
discovery (which every authenticated user may read, so no cluster-scoped
RBAC is needed), remembered for a while so a reconcile costs no extra call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamflow.operator.kubernetes import names, resources
from streamflow.operator.kubernetes.spec import AppResource

__all__ = ["GROUP", "KIND", "PLURAL", "VERSION", "Probe", "same", "scaled_object"]

GROUP = "keda.sh"
VERSION = "v1alpha1"
PLURAL = "scaledobjects"
KIND = "ScaledObject"
_MAX_WINDOW_S = 3600  # the HPA refuses longer stabilization windows


def scaled_object(resource: AppResource, streamlet: str, *, topics: list[str]) -> dict[str, Any]:
    """The ScaledObject that lets KEDA scale ``streamlet``'s Deployment by its input's lag."""
    auto = resource.app.streamlets[streamlet].autoscale
    if auto is None:
        raise ValueError(f"{streamlet} has no autoscale")
    name = names.child_name(resource.name, streamlet)
    group = resource.app.consumer_group(streamlet)
    up, down = _window(auto.scale_up_after), _window(auto.scale_down_after)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": resource.namespace,
            "labels": resources.labels(resource, streamlet),
            "annotations": {names.STREAMLET_ANNOTATION: streamlet},
            "ownerReferences": [resource.owner_reference()],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicaCount": auto.min,
            "maxReplicaCount": auto.max,
            "cooldownPeriod": down,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": up},
                        "scaleDown": {"stabilizationWindowSeconds": down},
                    }
                }
            },
            "triggers": [
                {
                    "type": "kafka",
                    "metadata": {
                        "bootstrapServers": resource.app.kafka.bootstrap or "",
                        "consumerGroup": group,
                        "topic": topic,
                        "lagThreshold": str(auto.target_lag),
                        "offsetResetPolicy": "earliest",
                    },
                }
                for topic in topics
            ],
        },
    }


def same(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a ScaledObject read back already says what ``wanted`` says (its status aside)."""
    mine, theirs = wanted["metadata"], found.get("metadata") or {}
    return found.get("spec") == wanted["spec"] and all(
        theirs.get(key) == mine[key] for key in ("labels", "ownerReferences")
    )


def _window(seconds: float) -> int:
    return min(max(round(seconds), 0), _MAX_WINDOW_S)


@dataclass
class Probe:
    """Whether the cluster serves ScaledObjects, asked at most every ``ttl`` seconds."""

    ask: Callable[[], bool]
    ttl: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _answer: tuple[float, bool] | None = field(default=None, init=False)

    def __call__(self) -> bool:
        now = self.clock()
        if self._answer is None or now - self._answer[0] >= self.ttl:
            self._answer = (now, self.ask())
        return self._answer[1]
