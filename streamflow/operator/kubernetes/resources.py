"""The bodies of a streamlet's children: its ConfigMap, Deployment and Service. Pure.

Each builder takes the application resource and returns a plain dict, so
what the operator will write is unit-tested without a cluster, and the
executor only sends it.

Choices worth knowing:

* The pod template carries ``streamflow.io/config-checksum``: the planner's
  fingerprint of the streamlet, extended with everything else its pods read
  (the ConfigMap's ``app.json``, the image, the resources, the working
  directory, and a digest of the Kafka Secret's data). A change to one
  streamlet changes its checksum alone, so only its pods roll; a change of
  replicas changes no checksum and rolls nothing; rotating the Secret's
  credentials rolls every pod that mounts it (the operator re-reads the
  Secret on each reconcile, the periodic resync included).
* The ConfigMap holds what the streamlet's pods run (``app.json``, what
  ``streamflow streamlet run --app-spec`` reads) and that streamlet's resolved
  config (``config.json``, for people). ``app.json`` holds only that streamlet
  and the topics it is bound to (:func:`~streamflow.operator.kubernetes.spec.
  pod_app_spec`), so it changes exactly when the streamlet's checksum does: it
  is written with the Deployment on every create and roll, and is never a
  stale copy of another streamlet's settings.
* The pods' working directory is the blueprint's directory inside the image
  (``/app/blueprints/wine``), as the local target runs each replica in the
  blueprint's directory: a relative path in a config (``models/wine-v1.keras``)
  and the spec's relative search paths resolve the same way on both targets.
* Kafka credentials reach the pod only through ``envFrom`` of the Secret the
  spec names: its keys become ``STREAMFLOW_KAFKA_<KEY>`` variables (``SASL_
  PASSWORD`` -> ``sasl.password``); nothing secret is ever in the spec, the
  ConfigMap or the Deployment.
* A replica's identity is its pod. A Deployment has no ordinals, so the
  replica number (the Kafka ``client.id`` and transactional id
  ``<app>.<streamlet>.<n>``, and the ``replica`` label of its metrics) is a
  checksum of the pod's name: a container restarted in the same pod keeps
  its id and its metric series; a replacement pod (a rollout, an eviction) is
  a new member with a new name and a new id, exactly as its ``pod`` label in
  Prometheus is new. Nothing needs more: partitions are assigned by the
  consumer group, and exactly-once fences zombies by the group's generation
  (KIP-447), not by stable transactional ids. Stable ordinals would need a
  StatefulSet (as Kafka Streams' state stores do); Cloudflow and KServe run
  Deployments too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from streamflow.operator import planner
from streamflow.operator.kubernetes import names
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.spec import AppResource, pod_app_spec

__all__ = [
    "CONFIG_DIR",
    "HEALTH_PORT",
    "KAFKA_ENV_PREFIX",
    "checksum",
    "config_map",
    "deployment",
    "labels",
    "selector",
    "service",
]

HEALTH_PORT = 8080
CONFIG_DIR = "/etc/streamflow"
KAFKA_ENV_PREFIX = "STREAMFLOW_KAFKA_"
_CONTAINER = "streamlet"
_RUN_AS = 10001

# The pod's replica number: a checksum of its name, which the API server made unique.
_ENTRYPOINT = (
    'exec streamflow streamlet run "$@" '
    '--replica "$(printf %s "$POD_NAME" | cksum | cut -d " " -f 1)"'
)


def pod_security() -> dict[str, Any]:
    """The pod securityContext of everything that runs an application's image."""
    return {
        "runAsNonRoot": True,
        "runAsUser": _RUN_AS,
        "runAsGroup": _RUN_AS,
        "fsGroup": _RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """The container securityContext to go with :func:`pod_security`: read-only, unprivileged."""
    return {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def selector(resource: AppResource, streamlet: str) -> dict[str, str]:
    """The labels that pick a streamlet's pods (a Deployment's selector never changes)."""
    return {
        names.APP_LABEL: names.label_value(resource.name),
        names.STREAMLET_LABEL: names.label_value(streamlet),
    }


def labels(resource: AppResource, streamlet: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": names.label_value(streamlet),
        "app.kubernetes.io/instance": names.child_name(resource.name, streamlet),
        "app.kubernetes.io/component": "streamlet",
        "app.kubernetes.io/part-of": names.label_value(resource.name),
        "app.kubernetes.io/managed-by": names.MANAGED_BY,
        **selector(resource, streamlet),
    }


def checksum(resource: AppResource, streamlet: str) -> str:
    """What the pod template is stamped with: changes exactly when its pods must restart."""
    material = {
        "streamlet": planner.fingerprint(resource.app, streamlet),
        "image": resource.pods.image,
        "pull": resource.pods.image_pull_policy,
        "resources": resource.pods.resources_of(streamlet),
        "secret": resource.app.kafka.secret,
        "secret_data": resource.secret_digest,
        "registry": resource.app.kafka.schema_registry,
        "app": pod_app_spec(resource, streamlet),
        "workdir": resource.layout.working_dir(),
    }
    text = json.dumps(material, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _metadata(resource: AppResource, streamlet: str) -> dict[str, Any]:
    return {
        "name": names.child_name(resource.name, streamlet),
        "namespace": resource.namespace,
        "labels": labels(resource, streamlet),
        "annotations": {names.STREAMLET_ANNOTATION: streamlet},
        "ownerReferences": [resource.owner_reference()],
    }


def config_map(resource: AppResource, streamlet: str, facts: Facts) -> dict[str, Any]:
    metadata = _metadata(resource, streamlet)
    metadata["annotations"][names.CHECKSUM_ANNOTATION] = checksum(resource, streamlet)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {
            "app.json": json.dumps(pod_app_spec(resource, streamlet), indent=2, sort_keys=True),
            "config.json": json.dumps(facts.config, indent=2, sort_keys=True, default=str),
        },
    }


def service(resource: AppResource, streamlet: str, port: int) -> dict[str, Any]:
    """A ClusterIP Service in front of an HTTP ingress streamlet's pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(resource, streamlet),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(resource, streamlet),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def deployment(
    resource: AppResource, streamlet: str, facts: Facts, *, replicas: int | None = None
) -> dict[str, Any]:
    """``replicas``: the planner's count, which for an autoscaled streamlet is not the spec's."""
    spec = resource.app.streamlets[streamlet]
    annotations = {
        names.CHECKSUM_ANNOTATION: checksum(resource, streamlet),
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(HEALTH_PORT),
        "prometheus.io/path": "/metrics",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(resource, streamlet),
        "spec": {
            "replicas": spec.replicas if replicas is None else replicas,
            "selector": {"matchLabels": selector(resource, streamlet)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "progressDeadlineSeconds": 300,
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": {"labels": labels(resource, streamlet), "annotations": annotations},
                "spec": _pod_spec(resource, streamlet, facts),
            },
        },
    }


def _pod_spec(resource: AppResource, streamlet: str, facts: Facts) -> dict[str, Any]:
    config_name = names.child_name(resource.name, streamlet)
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": pod_security(),
        "containers": [_container(resource, streamlet, facts)],
        "volumes": [
            {"name": "config", "configMap": {"name": config_name}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        ],
    }


def _container(resource: AppResource, streamlet: str, facts: Facts) -> dict[str, Any]:
    ports = [{"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}]
    if facts.http_port is not None:
        ports.append({"name": "http", "containerPort": facts.http_port, "protocol": "TCP"})
    container: dict[str, Any] = {
        "name": _CONTAINER,
        "image": resource.pods.image,
        "imagePullPolicy": resource.pods.image_pull_policy,
        "workingDir": resource.layout.working_dir(),
        "command": ["/bin/sh", "-c", _ENTRYPOINT, "streamflow"],
        "args": _args(streamlet),
        "ports": ports,
        "env": _env(http=facts.http_port is not None),
        "resources": resource.pods.resources_of(streamlet),
        "livenessProbe": _probe("/healthz", period=10, failures=3, initial=10),
        "readinessProbe": _probe("/readyz", period=5, failures=2, initial=5),
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if resource.app.kafka.secret:
        container["envFrom"] = [
            {"prefix": KAFKA_ENV_PREFIX, "secretRef": {"name": resource.app.kafka.secret}}
        ]
    return container


def _args(streamlet: str) -> list[str]:
    return [
        f"--app-spec={CONFIG_DIR}/app.json",
        f"--streamlet={streamlet}",
        f"--health-port={HEALTH_PORT}",
        "--health-host=0.0.0.0",
        "--log-format=json",
    ]


def _env(*, http: bool) -> list[dict[str, Any]]:
    def field(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    env = [
        {"name": "POD_NAME", **field("metadata.name")},
        {"name": "POD_NAMESPACE", **field("metadata.namespace")},
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
    ]
    if http:
        # The HTTP ingress binds loopback by default; its Service reaches it on the pod's IP.
        env.append({"name": "STREAMFLOW_HTTP_HOST", "value": "0.0.0.0"})
    return env


def _probe(path: str, *, period: int, failures: int, initial: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "health"},
        "initialDelaySeconds": initial,
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }
