"""Verifying an application where its code is: a short-lived Job from its own image.

On a cluster the operator's pod runs the plain streamflow image, which holds
none of the applications' code: verified there, every class would be unknown.
Each application's image holds its project at ``/app``, so the verifier
(:mod:`~streamflow.operator.kubernetes.verify_child`) runs as a Job from that
image (``--verify-in job``, the default), in the application's namespace, as
its replicas would run: the same image and pull policy, the same security
context, the blueprint's directory as the working directory. It needs no Kafka
and no Secret: the verifier reads the spec and imports the classes, nothing
more.

**The Job.** Named after the application and a hash of what is verified (the
application, its image, its working directory; :func:`spec_key`), so a resync
finds the Job it started rather than starting another, and a changed spec gets
a new one (the older one, superseded, is deleted). The key holds the image
reference, not its content: an image pulled ``Always`` from a tag that moved is
not verified again until the spec changes (see
:mod:`~streamflow.operator.kubernetes.recorded`); pin images by digest. ``backoffLimit: 0``: a
verifier that crashed would crash again. ``activeDeadlineSeconds`` bounds a pod
that never starts (an image that cannot be pulled, a pod that cannot be
scheduled); ``ttlSecondsAfterFinished`` cleans up a Job nobody came back for;
the application owns it, so it goes with the application.

The verifier that starts these Jobs and reads their answers is
:mod:`~streamflow.operator.kubernetes.job_verifier`.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Any

from streamflow.operator.kubernetes import names, resources, verify
from streamflow.operator.kubernetes.spec import APP_ROOT, AppResource
from streamflow.operator.kubernetes.verify import CHILD_MODULE
from streamflow.operator.kubernetes.verify_child import REQUEST_ENV, encode_request

__all__ = [
    "COMPONENT",
    "CONTAINER",
    "DEADLINE_S",
    "SPEC_HASH_LABEL",
    "TTL_S",
    "job",
    "job_name",
    "request",
    "selector",
    "spec_key",
]

COMPONENT = "verifier"
CONTAINER = "verifier"
SPEC_HASH_LABEL = f"{names.GROUP}/spec-hash"
# Pulling an image with TensorFlow in it takes minutes on a cold node; the verifier, seconds.
DEADLINE_S = 600
TTL_S = 3600
# It imports every streamlet's module (TensorFlow's included), loading no model:
# the requests of an ordinary streamlet, the limit of a serving one.
_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}


def request(resource: AppResource, *, root: str = APP_ROOT) -> dict[str, Any]:
    """The application as the Job's verifier reads it: its paths where they are in the image.

    ``root``: where the image holds the project (a test runs the child over a checkout).
    """
    base = resource.layout.working_dir(root)

    def inside(path: str) -> str:
        return posixpath.normpath(posixpath.join(base, path))

    data = verify.verified_part(resource.app)
    data["source"] = inside(resource.layout.source) if resource.layout.source else ""
    data["python_paths"] = [inside(p) for p in resource.layout.python_paths]
    data["schema_paths"] = [inside(p) for p in resource.layout.schema_paths]
    return data


def spec_key(resource: AppResource) -> str:
    """A hash of everything the verification depends on (not the Secret: it reads no Kafka)."""
    material = {
        "application": request(resource),
        "image": resource.pods.image,
        "pull": resource.pods.image_pull_policy,
        "workdir": resource.layout.working_dir(),
    }
    text = json.dumps(material, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def job_name(resource: AppResource, key: str) -> str:
    return names.child_name(resource.name, f"verify-{key[:10]}")


def selector(resource: AppResource) -> str:
    """The label selector of an application's verifier Jobs (and their pods)."""
    return ",".join(f"{k}={v}" for k, v in _selected(resource).items())


def _selected(resource: AppResource) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": names.MANAGED_BY,
        "app.kubernetes.io/component": COMPONENT,
        names.APP_LABEL: names.label_value(resource.name),
    }


def job(
    resource: AppResource, *, deadline_s: int = DEADLINE_S, ttl_s: int = TTL_S
) -> dict[str, Any]:
    """The Job that verifies ``resource`` from its image. Pure."""
    key = spec_key(resource)
    labels = {
        "app.kubernetes.io/name": "streamflow-verifier",
        "app.kubernetes.io/part-of": names.label_value(resource.name),
        **_selected(resource),
        SPEC_HASH_LABEL: key,
    }
    container = {
        "name": CONTAINER,
        "image": resource.pods.image,
        "imagePullPolicy": resource.pods.image_pull_policy,
        "workingDir": resource.layout.working_dir(),
        # -P: the working directory does not shadow the application's own python_paths
        "command": ["python3", "-P", "-m", CHILD_MODULE],
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": REQUEST_ENV, "value": encode_request(request(resource))},
        ],
        "resources": {kind: dict(amounts) for kind, amounts in _RESOURCES.items()},
        "securityContext": resources.container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(resource, key),
            "namespace": resource.namespace,
            "labels": labels,
            "ownerReferences": [resource.owner_reference()],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": ttl_s,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": resources.pod_security(),
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
                },
            },
        },
    }
