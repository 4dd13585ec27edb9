"""Carrying out the planner's actions on a cluster, and reading back what is there.

:class:`Cluster` is the operator's whole vocabulary of API calls (list a
streamlet's children, create or replace one, patch a status, run the
verifier's Job and read its pod's log), each returning
plain dicts, so the rest of the operator never touches a generated model class.
:class:`Executor` turns one :mod:`~streamflow.operator.planner` action into
those calls:

* ``Create`` writes the ConfigMap first (the pods mount it), then the Service
  of an HTTP ingress, then the Deployment;
* ``Roll`` rewrites the ConfigMap and replaces the Deployment's spec, whose
  new pod-template checksum makes the Deployment controller roll the pods
  (at the action's replicas: an autoscaled streamlet keeps its count);
* ``Scale`` patches ``spec.replicas`` and nothing else, so nothing rolls;
* ``Delete`` removes the three children (each may already be gone).

Every write tolerates finding the cluster already as wanted (409 on create
becomes a replace, 404 on delete is success), so an action interrupted by an
operator restart is simply planned and applied again.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from streamflow.operator import planner
from streamflow.operator.kubernetes import keda, names, resources
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.client import REQUEST_TIMEOUT
from streamflow.operator.kubernetes.spec import AppResource

__all__ = ["Cluster", "Executor", "decode"]

_MANAGED = f"app.kubernetes.io/managed-by={names.MANAGED_BY}"


class Cluster:
    """The API calls the operator makes, on plain dicts."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # -- the application resource -------------------------------------------------

    def get_app(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return decode(
                self.custom.get_namespaced_custom_object(
                    names.GROUP, names.VERSION, namespace, names.PLURAL, name, **_RAW
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_apps(self, namespace: str) -> list[dict[str, Any]]:
        found = self.custom.list_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, **_RAW
        )
        return list(decode(found).get("items") or [])

    def create_app(self, body: Mapping[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        self.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, dict(body), **_RAW
        )

    def patch_app(self, namespace: str, name: str, patch: Any) -> None:
        """A JSON merge patch (a dict) or a JSON patch (a list of operations)."""
        kind = "json-patch" if isinstance(patch, list) else "merge-patch"
        self.custom.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL,
            name,
            patch,
            _content_type=f"application/{kind}+json",
            **_RAW,
        )

    def delete_app(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, name, **_RAW
        )

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL,
            name,
            {"status": dict(status)},
            _request_timeout=REQUEST_TIMEOUT,
        )

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Secret (its metadata and base64 data), or None if missing or forbidden."""
        try:
            return decode(self.core.read_namespaced_secret(name, namespace, **_RAW))
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise

    def post_event(
        self, resource: Mapping[str, Any], *, type_: str, reason: str, message: str
    ) -> None:
        """A core/v1 Event about ``resource``, as ``kubectl describe`` lists them."""
        metadata = resource["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Any = {
            "metadata": {
                "generateName": f"{metadata['name']}.",
                "namespace": metadata["namespace"],
            },
            "involvedObject": {
                "apiVersion": resource.get("apiVersion", names.API_VERSION),
                "kind": resource.get("kind", names.KIND),
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],  # the API server refuses long messages
            "source": {"component": names.MANAGED_BY},
            "reportingComponent": names.MANAGED_BY,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.core.create_namespaced_event(metadata["namespace"], body, **_RAW)

    # -- children, by streamlet ---------------------------------------------------

    def deployments(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        found = self.apps.list_namespaced_deployment(namespace, label_selector=_of(app), **_RAW)
        return _by_streamlet(decode(found))

    def config_maps(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        found = self.core.list_namespaced_config_map(namespace, label_selector=_of(app), **_RAW)
        return _by_streamlet(decode(found))

    def services(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        found = self.core.list_namespaced_service(namespace, label_selector=_of(app), **_RAW)
        return _by_streamlet(decode(found))

    def put(self, body: Mapping[str, Any]) -> None:
        """Create ``body``, or replace the object of that name with it."""
        kind = body["kind"]
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        create, read, replace = self._verbs(kind)
        try:
            create(namespace, body, _request_timeout=REQUEST_TIMEOUT)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        current = decode(read(name, namespace, **_RAW))
        updated = {**body, "metadata": {**body["metadata"]}}
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        # Keep what controllers noted (a Deployment's revision); ours win where both speak.
        updated["metadata"]["annotations"] = {
            **(current["metadata"].get("annotations") or {}),
            **(body["metadata"].get("annotations") or {}),
        }
        if kind == "Service":  # the API server owns these; a replace must keep them
            updated["spec"] = {
                **body["spec"],
                **{k: v for k, v in current["spec"].items() if k in _SERVICE_KEPT},
            }
        replace(name, namespace, updated, _request_timeout=REQUEST_TIMEOUT)

    # -- KEDA's ScaledObjects --------------------------------------------------------

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` in ``group/version`` (by discovery)."""
        try:
            found = decode(self.custom.get_api_resources(group, version, **_RAW))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.get("name") == plural for r in found.get("resources") or [])

    def scaled_objects(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        found = self.custom.list_namespaced_custom_object(
            keda.GROUP, keda.VERSION, namespace, keda.PLURAL, label_selector=_of(app), **_RAW
        )
        return _by_streamlet(decode(found))

    def put_scaled_object(self, body: Mapping[str, Any]) -> None:
        """Create the ScaledObject, or replace its spec and labels (its status is KEDA's)."""
        metadata = body["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        where = (keda.GROUP, keda.VERSION, namespace, keda.PLURAL)
        try:
            self.custom.create_namespaced_custom_object(*where, dict(body), **_RAW)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        current = decode(self.custom.get_namespaced_custom_object(*where, name, **_RAW))
        updated = {**current, "spec": body["spec"], "metadata": {**current["metadata"]}}
        for key in ("labels", "annotations", "ownerReferences"):
            updated["metadata"][key] = metadata[key]
        self.custom.replace_namespaced_custom_object(*where, name, updated, **_RAW)

    def delete_scaled_object(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                keda.GROUP, keda.VERSION, namespace, keda.PLURAL, name, **_RAW
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        self.apps.patch_namespaced_deployment(
            name, namespace, {"spec": {"replicas": replicas}}, _request_timeout=REQUEST_TIMEOUT
        )

    def delete(self, kind: str, namespace: str, name: str) -> None:
        delete = {
            "Deployment": self.apps.delete_namespaced_deployment,
            "ConfigMap": self.core.delete_namespaced_config_map,
            "Service": self.core.delete_namespaced_service,
        }[kind]
        try:
            delete(
                name,
                namespace,
                propagation_policy="Background",
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- the verifier's Jobs (verify_job.py) -----------------------------------------

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The Jobs that match a label selector, those being deleted included."""
        found = self.batch.list_namespaced_job(namespace, label_selector=selector, **_RAW)
        return list(decode(found).get("items") or [])

    def create_job(self, body: Mapping[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        plain: Any = dict(body)  # the client sends a dict as it is
        self.batch.create_namespaced_job(namespace, plain, _request_timeout=REQUEST_TIMEOUT)

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a Job; its pods follow it (propagation in the background), gone or not."""
        try:
            self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        found = self.core.list_namespaced_pod(namespace, label_selector=selector, **_RAW)
        return list(decode(found).get("items") or [])

    def pod_log(self, namespace: str, name: str, *, container: str) -> str:
        """A pod's whole log (the API server has no 4 KiB cap, unlike a termination message)."""
        response: Any = self.core.read_namespaced_pod_log(
            name, namespace, container=container, **_RAW
        )
        return bytes(response.data).decode(errors="replace")

    def _verbs(self, kind: str) -> tuple[Any, Any, Any]:
        return {
            "Deployment": (
                self.apps.create_namespaced_deployment,
                self.apps.read_namespaced_deployment,
                self.apps.replace_namespaced_deployment,
            ),
            "ConfigMap": (
                self.core.create_namespaced_config_map,
                self.core.read_namespaced_config_map,
                self.core.replace_namespaced_config_map,
            ),
            "Service": (
                self.core.create_namespaced_service,
                self.core.read_namespaced_service,
                self.core.replace_namespaced_service,
            ),
        }[kind]


_RAW: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}
_SERVICE_KEPT = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy")


def decode(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data


def _of(app: str) -> str:
    return f"{_MANAGED},{names.APP_LABEL}={names.label_value(app)}"


def _by_streamlet(listing: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in listing.get("items") or []:
        metadata = item.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            continue  # going away: as good as gone for planning
        streamlet = (metadata.get("annotations") or {}).get(names.STREAMLET_ANNOTATION) or (
            metadata.get("labels") or {}
        ).get(names.STREAMLET_LABEL)
        if streamlet:
            out[str(streamlet)] = item
    return out


class Executor:
    """Applies planner actions to one application's children."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def apply(self, resource: AppResource, action: planner.Action, facts: Facts | None) -> None:
        namespace = resource.namespace
        match action:
            case (
                planner.Create(streamlet=streamlet, replicas=replicas)
                | planner.Roll(streamlet=streamlet, replicas=replicas)
            ):
                assert facts is not None
                self.write_config(resource, streamlet, facts)
                self.sync_service(resource, streamlet, facts)
                body = resources.deployment(resource, streamlet, facts, replicas=replicas)
                self.cluster.put(body)
            case planner.Scale(streamlet=streamlet, replicas=replicas):
                name = names.child_name(resource.name, streamlet)
                self.cluster.scale(namespace, name, replicas)
            case planner.Delete(streamlet=streamlet):
                name = names.child_name(resource.name, streamlet)
                for kind in ("Deployment", "Service", "ConfigMap"):
                    self.cluster.delete(kind, namespace, name)

    def write_config(self, resource: AppResource, streamlet: str, facts: Facts) -> None:
        self.cluster.put(resources.config_map(resource, streamlet, facts))

    def sync_service(
        self,
        resource: AppResource,
        streamlet: str,
        facts: Facts,
        existing: Mapping[str, Any] | None = None,
    ) -> bool:
        """Make the streamlet's Service match what it serves; whether anything was written."""
        name = names.child_name(resource.name, streamlet)
        if facts.http_port is None:
            if facts.unknown_class is not None:
                return False  # we cannot tell: leave any Service of an earlier version be
            if existing is None:
                return False
            self.cluster.delete("Service", resource.namespace, name)
            return True
        wanted = resources.service(resource, streamlet, facts.http_port)
        if existing is not None and _same_ports(existing, wanted):
            return False
        self.cluster.put(wanted)
        return True


def _same_ports(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    def ports(body: Mapping[str, Any]) -> list[tuple[Any, Any]]:
        return sorted((p.get("name"), p.get("port")) for p in body["spec"].get("ports") or [])

    return ports(existing) == ports(wanted)
