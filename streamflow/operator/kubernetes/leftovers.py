"""What is left of an application being deleted: the resource, its finalizers, its children.

Deleting a StreamflowApplication is quick to ask and slow to finish: the
resource goes once nothing holds it (a finalizer), and its Deployments,
ConfigMaps, Services and pods go after it, through the garbage collector.
``streamflow undeploy`` waits for all of it, and when it waits in vain it must
say what is still there and what holds it, so the user knows whom to ask:
a finalizer names the controller that put it there, and a child that does not
go says the garbage collector (kube-controller-manager) is not running.
A kind it is not allowed to list (403) is not "nothing left": it says it
cannot tell, and the wait is not over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from streamflow.operator.kubernetes import names
from streamflow.operator.kubernetes.client import REQUEST_TIMEOUT
from streamflow.operator.kubernetes.executor import Cluster

__all__ = ["Leftovers", "find"]

_CHILD_KINDS = ("deployment", "configmap", "service")


@dataclass(frozen=True)
class Leftovers:
    """What remains of one application; nothing at all once it is gone."""

    resource: str  # the resource's name
    present: bool  # the StreamflowApplication itself is still there
    finalizers: tuple[str, ...] = ()
    children: tuple[str, ...] = ()  # kind/name of each Deployment, ConfigMap, Service left
    pods: int = 0
    unseen: tuple[str, ...] = ()  # kinds it may not list (403): nothing known either way

    @property
    def gone(self) -> bool:
        return not self.present and not self.children and not self.pods and not self.unseen

    def progress(self) -> str:
        """``the resource (finalizers: x), 3 deployments, 2 pods left``: a line while waiting."""
        parts = []
        if self.present:
            held = f" (finalizers: {', '.join(self.finalizers)})" if self.finalizers else ""
            parts.append(f"the resource{held}")
        counts: dict[str, int] = {}
        for child in self.children:
            kind = child.partition("/")[0]
            counts[kind] = counts.get(kind, 0) + 1
        parts += [_plural(n, kind) for kind, n in counts.items()]
        if self.pods:
            parts.append(_plural(self.pods, "pod"))
        if self.unseen:
            parts.append(f"{', '.join(self.unseen)} unknown")
        return (", ".join(parts) + " left") if parts else "gone"

    def problems(self) -> list[str]:
        """What holds the deletion up, and what to do about it."""
        out = []
        if self.present and self.finalizers:
            out.append(
                f"StreamflowApplication {self.resource} is held by the finalizers "
                f"{', '.join(self.finalizers)}: the controller that added each must remove it; "
                "if that controller is gone for good, remove them with `kubectl patch "
                f"sfapp {self.resource} --type=merge -p "
                '\'{"metadata":{"finalizers":null}}\'`'
            )
        elif self.present:
            out.append(f"StreamflowApplication {self.resource} is still there")
        if self.children or self.pods:
            still = [*self.children, *([_plural(self.pods, "pod")] if self.pods else [])]
            out.append(
                f"still there: {', '.join(still)}; they are deleted by the cluster's garbage "
                "collector (kube-controller-manager) once the resource is gone"
            )
        if self.unseen:
            out.append(
                f"cannot tell whether any {', '.join(self.unseen)} are left: not allowed to "
                "list them (403); ask for the `list` right on them, or look with `kubectl get`"
            )
        return out


def find(cluster: Cluster, namespace: str, resource: str) -> Leftovers:
    """What is left of ``resource`` in ``namespace`` now."""
    body = cluster.get_app(namespace, resource)
    finalizers = tuple((body or {}).get("metadata", {}).get("finalizers") or ())
    selector = f"{names.APP_LABEL}={names.label_value(resource)}"
    listings = {
        "deployment": cluster.apps.list_namespaced_deployment,
        "configmap": cluster.core.list_namespaced_config_map,
        "service": cluster.core.list_namespaced_service,
    }
    listings["pod"] = cluster.core.list_namespaced_pod
    found = {kind: _items(listing, namespace, selector) for kind, listing in listings.items()}
    children = tuple(
        f"{kind}/{item['metadata']['name']}" for kind in _CHILD_KINDS for item in found[kind] or []
    )
    unseen = tuple(f"{kind}s" for kind, items in found.items() if items is None)
    pods = len(found["pod"] or [])
    return Leftovers(resource, body is not None, finalizers, children, pods, unseen)


def _items(listing: Any, namespace: str, selector: str) -> list[dict[str, Any]] | None:
    """The items listed; None if this kind may not be listed (403): nothing is known."""
    try:
        response = listing(
            namespace,
            label_selector=selector,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
    except ApiException as exc:
        if exc.status == 403:  # not allowed to look: not "none left"
            return None
        raise
    items: list[dict[str, Any]] = json.loads(response.data).get("items") or []
    return items


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"
