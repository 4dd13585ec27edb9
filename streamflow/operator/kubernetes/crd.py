"""The StreamflowApplication CustomResourceDefinition, written once, in Python.

The spec *is* :meth:`Application.to_dict` plus a few deploy-time fields
(``image``, ``imagePullPolicy``, ``resources``, ``blueprintDir``), so the
schema of its Application part is generated from the Application's field table
(:mod:`streamflow.schema.fields`: types, bounds, docs), with the field names the
Kubernetes API conventions ask for: every multi-word field is camelCase. It is structural, so the
API server itself rejects a malformed resource with the path of the offending
field (``spec.streamlets.scorer.replicas: Invalid value: -1``) before the
operator ever sees it; only a streamlet's ``config`` stays free-form, since its shape belongs to the
streamlet's class (the operator checks it against the class's parameters).

``operator/crd.yaml`` is generated from :func:`definition` and a test keeps
the two identical.
"""

from __future__ import annotations

from typing import Any

from streamflow.blueprint.model import RESOURCES_SCHEMA, Application
from streamflow.operator.kubernetes import names
from streamflow.operator.targets.phases import Phase
from streamflow.schema import fields

__all__ = ["definition", "spec_schema", "status_schema"]


def _string(**extra: Any) -> dict[str, Any]:
    return {"type": "string", **extra}


def _resources(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "properties": RESOURCES_SCHEMA}


def spec_schema() -> dict[str, Any]:
    """The OpenAPI v3 schema of ``spec``: the Application's, plus the deploy-time fields."""
    schema = fields.openapi(Application, naming=fields.camel_case)
    relative = "Relative to blueprintDir, the pods' working directory."
    properties = schema["properties"]
    properties["source"]["description"] = "The blueprint's file name, in blueprintDir."
    for key in ("schemaPaths", "pythonPaths"):
        properties[key]["description"] += f" {relative}"
    properties.update(
        blueprintDir=_string(
            description="The blueprint's directory, relative to the application root of "
            "the image (/app): the pods' working directory."
        ),
        image=_string(
            minLength=1,
            description="The streamlets' container image: the streamflow image with the "
            "project at /app.",
        ),
        imagePullPolicy=_string(enum=["Always", "IfNotPresent", "Never"]),
        resources=_resources("Default CPU and memory of every streamlet's pods."),
    )
    # a resource runs pods: it needs an image and something to run in them
    schema["required"] = [*schema.get("required", ()), "image", "streamlets"]
    return schema


def _autoscale_status() -> dict[str, Any]:
    """``status.autoscale.<streamlet>``: the last decision and why (see scaling.py)."""
    count = {"type": "integer", "minimum": 0}
    return {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "by": _string(enum=["operator", "keda"], description="Who scales it."),
                "replicas": count,
                "wanted": count,
                "reason": _string(),
                "lag": {"type": "integer"},
                "rateIn": {"type": "number", "description": "Records/s into the input."},
                "decidedAt": _string(format="date-time"),
                "decisions": count,
            },
        },
    }


def _rollout_status() -> dict[str, Any]:
    """``status.rollouts.<streamlet>``: its model's versions and the last decision (see
    rollout_status.py)."""
    version = {"type": "integer", "minimum": 0}
    decision = {
        "type": "object",
        "properties": {
            "candidate": version,
            "sequence": version,
            "verdict": _string(enum=["HOLD", "ADVANCE", "PROMOTE", "ROLLBACK"]),
            "step": version,
            "steps": version,
            "mode": _string(),
            "share": {"type": "number"},
            "reason": _string(maxLength=1024),
            "windows": version,
            "decidedAt": _string(format="date-time"),
        },
    }
    return {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "model": _string(),
                "stable": version,
                "candidate": version,
                "mode": _string(enum=["shadow", "canary", "ab"]),
                "share": {"type": "number", "description": "Percent of the keys (canary, ab)."},
                "arms": {"type": "array", "items": _string()},
                "lastDecision": decision,
            },
        },
    }


def status_schema() -> dict[str, Any]:
    """The OpenAPI v3 schema of ``status``, written only by the operator."""
    count = {"type": "integer", "minimum": 0}
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": _string(),
            "status": _string(enum=["True", "False", "Unknown"]),
            "reason": _string(),
            "message": _string(),
            "lastTransitionTime": _string(format="date-time"),
        },
    }
    return {
        "type": "object",
        "properties": {
            "phase": _string(enum=[phase.value for phase in Phase]),
            "message": _string(),
            "ready": _string(description="Streamlets with all replicas ready, of all."),
            "observedGeneration": {"type": "integer"},
            "streamlets": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "desired": count,
                        "ready": count,
                        "updated": count,
                        "available": count,
                    },
                },
            },
            "conditions": {"type": "array", "items": condition},
            "autoscale": _autoscale_status(),
            "rollouts": _rollout_status(),
            "verified": {
                "type": "object",
                "description": "The spec that last verified, and what the verifier learnt.",
                "properties": {"key": _string()},
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    }


def _columns() -> list[dict[str, Any]]:
    return [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {
            "name": "Ready",
            "type": "string",
            "jsonPath": ".status.ready",
            "description": "Streamlets with all replicas ready, of all.",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
    ]


def definition() -> dict[str, Any]:
    """The whole CustomResourceDefinition, ready for ``kubectl apply``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{names.PLURAL}.{names.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "streamflow"},
        },
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": names.KIND,
                "plural": names.PLURAL,
                "singular": names.SINGULAR,
                "shortNames": [names.SHORT_NAME],
                "categories": ["streamflow"],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _columns(),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A streamflow application: its blueprint, deployed.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": _string(),
                                "kind": _string(),
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }
