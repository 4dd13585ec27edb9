"""A StreamflowApplication's spec, to and from the Application model.

The spec is :meth:`Application.to_dict` (so nothing re-parses a blueprint) plus
the fields only a cluster needs: the container image, its pull policy and
the pods' resources. Those stay out of the Application, which knows nothing
of Kubernetes; :class:`PodSettings` carries them instead. ``None`` values are
dropped on the way in, since the API server prunes nulls anyway and a spec
that reads back the same as it was written keeps ``kubectl diff`` quiet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import streamflow
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import names

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_RESOURCES",
    "AppResource",
    "PodSettings",
    "SpecError",
    "body",
    "parse",
    "to_spec",
]

DEFAULT_IMAGE = f"streamflow:{streamflow.__version__}"
DEFAULT_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}


class SpecError(ValueError):
    """A resource whose spec cannot be turned into an application."""


@dataclass(frozen=True)
class PodSettings:
    """What a cluster needs to run the application's pods, beyond the Application itself."""

    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    resources: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    streamlet_resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def resources_of(self, streamlet: str) -> dict[str, Any]:
        """The streamlet's own requests and limits over the application's defaults."""
        own = self.streamlet_resources.get(streamlet, {})
        return {
            kind: {**dict(self.resources.get(kind) or {}), **dict(own.get(kind) or {})}
            for kind in ("requests", "limits")
            if self.resources.get(kind) or own.get(kind)
        }

    def to_spec(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "image_pull_policy": self.image_pull_policy,
            "resources": {k: dict(v) for k, v in self.resources.items()},
        }


@dataclass(frozen=True)
class AppResource:
    """One StreamflowApplication as the operator reads it."""

    name: str
    namespace: str
    uid: str
    generation: int
    app: Application
    pods: PodSettings

    def owner_reference(self) -> dict[str, Any]:
        """What makes a child garbage-collected with this resource."""
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def parse(resource: Mapping[str, Any]) -> AppResource:
    """The application a resource describes; :class:`SpecError` says what is wrong."""
    metadata = resource.get("metadata") or {}
    spec = resource.get("spec") or {}
    try:
        app = Application.from_dict(spec)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecError(
            f"spec cannot be read as an application: {type(exc).__name__}: {exc}"
        ) from None
    _check_references(app)
    _check_autoscale(app)
    streamlets = spec.get("streamlets") or {}
    pods = PodSettings(
        image=spec.get("image") or DEFAULT_IMAGE,
        image_pull_policy=spec.get("image_pull_policy") or "IfNotPresent",
        resources=spec.get("resources") or dict(DEFAULT_RESOURCES),
        streamlet_resources={
            name: s["resources"] for name, s in streamlets.items() if s.get("resources")
        },
    )
    return AppResource(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        uid=str(metadata.get("uid", "")),
        generation=int(metadata.get("generation") or 0),
        app=app,
        pods=pods,
    )


def _check_references(app: Application) -> None:
    """Topics must name streamlets the application has: the schema cannot say so."""
    unknown = sorted(
        f"spec.topics.{topic.name}: {ref} names no streamlet of spec.streamlets"
        for topic in app.topics.values()
        for ref in (*topic.producers, *topic.consumers)
        if ref.streamlet not in app.streamlets
    )
    if unknown:
        raise SpecError("; ".join(unknown))


def _check_autoscale(app: Application) -> None:
    """Bounds the policy can keep, as the verifier requires of a blueprint.

    The CRD's schema checks each number alone, but not ``min <= max``; without
    this an autoscaler would find every count outside its bounds, tick after tick.
    """
    problems = []
    for name, streamlet in sorted(app.streamlets.items()):
        auto = streamlet.autoscale
        if auto is None:
            continue
        where = f"spec.streamlets.{name}.autoscale"
        if auto.min < 0:
            problems.append(f"{where}.min ({auto.min}) must be 0 or more")
        if auto.max < 1:
            problems.append(f"{where}.max ({auto.max}) must be 1 or more")
        if auto.min > auto.max:
            problems.append(
                f"{where}: min ({auto.min}) is above max ({auto.max}); "
                "min is the fewest replicas, max the most"
            )
        if auto.target_lag < 1:
            problems.append(f"{where}.target_lag ({auto.target_lag}) must be 1 or more")
        for window in ("scale_up_after", "scale_down_after"):
            if getattr(auto, window) < 0:
                problems.append(f"{where}.{window} ({getattr(auto, window)}) must be 0 or more")
    if problems:
        raise SpecError("; ".join(problems))


def to_spec(app: Application, pods: PodSettings | None = None) -> dict[str, Any]:
    """The spec of the resource that deploys ``app``: its plain dict plus pod settings."""
    spec: dict[str, Any] = _without_nulls(app.to_dict())
    spec.update((pods or PodSettings()).to_spec())
    if pods is not None:
        for name, own in pods.streamlet_resources.items():
            spec["streamlets"][name]["resources"] = dict(own)
    return spec


def body(app: Application, *, namespace: str, pods: PodSettings | None = None) -> dict[str, Any]:
    """A whole StreamflowApplication for ``app``, named after it."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {
            "name": names.resource_name(app.name),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": names.label_value(app.name)},
        },
        "spec": to_spec(app, pods),
    }


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
