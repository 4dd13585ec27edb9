"""The StreamflowApplication CustomResourceDefinition, written once, in Python.

The spec *is* :meth:`Application.to_dict` plus a few deploy-time fields
(``image``, ``imagePullPolicy``, ``resources``, ``blueprintDir``), so the
schema mirrors that dict field by field, with the field names the Kubernetes
API conventions ask for: every multi-word field is camelCase (the conversion
is :mod:`~streamflow.operator.kubernetes.spec`'s). It is structural, so the
API server itself rejects a malformed resource with the path of the offending
field (``spec.streamlets.scorer.replicas: Invalid value: -1``) before the
operator ever sees it; only a streamlet's ``config`` stays free-form, since its shape belongs to the
streamlet's class (the operator checks it against the class's parameters).

``operator/crd.yaml`` is generated from :func:`definition` and a test keeps
the two identical.
"""

from __future__ import annotations

from typing import Any

from streamflow.blueprint.model import GUARANTEES
from streamflow.blueprint.verify_resources import QUANTITY_PATTERN
from streamflow.operator.kubernetes import names
from streamflow.operator.targets.phases import Phase
from streamflow.schema.formats import RegisterPolicy, TopicFormat

__all__ = ["definition", "spec_schema", "status_schema"]

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_PORT_REF = r"^[^.\s]+\.[^.\s]+$"
_QUANTITY = QUANTITY_PATTERN


def _string(**extra: Any) -> dict[str, Any]:
    return {"type": "string", **extra}


def _optional_string(description: str) -> dict[str, Any]:
    return {"type": "string", "nullable": True, "description": description}


def _scalar_map(description: str) -> dict[str, Any]:
    """Kafka and topic config: property name to a string or a number."""
    return {
        "type": "object",
        "description": description,
        "additionalProperties": {"x-kubernetes-int-or-string": True},
    }


def _quantities() -> dict[str, Any]:
    quantity = {"x-kubernetes-int-or-string": True, "pattern": _QUANTITY}
    return {
        "type": "object",
        "properties": {"cpu": quantity, "memory": quantity, "ephemeral-storage": quantity},
    }


def _resources(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": {"requests": _quantities(), "limits": _quantities()},
    }


def _streamlet() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["class"],
        "properties": {
            "class": _string(minLength=1, description="The streamlet class, module:Class."),
            "config": {
                "type": "object",
                "description": "Parameter values; checked against the class's parameters.",
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "replicas": {"type": "integer", "minimum": 0, "description": "Pods to run."},
            "guarantee": _string(enum=list(GUARANTEES)),
            "dlq": _optional_string("The dead-letter topic; default <app>.<streamlet>.dlq."),
            "resources": _resources("CPU and memory of this streamlet's pods."),
            "autoscale": _autoscale(),
            "stallAfter": {
                "type": "number",
                "minimum": 5,
                "nullable": True,
                "description": "Seconds a pod with records waiting may take none before its "
                "liveness probe fails (default 60).",
            },
            "lineage": {
                "type": "boolean",
                "description": "Copy the lineage headers of `streamflow score` from each "
                "input to its outputs (default true).",
            },
            "decodeLimits": _decode_limits(),
        },
    }


def _decode_limits() -> dict[str, Any]:
    whole = {"type": "integer", "minimum": 1}
    return {
        "type": "object",
        "nullable": True,
        "description": "What one input record may declare once decoded; past a limit it is "
        "dead-lettered before it is decoded.",
        "properties": {
            "maxItems": {**whole, "description": "Items in one array or map (1000000)."},
            "maxRecordBytes": {**whole, "description": "Bytes of one decoded record (64Mi)."},
            "maxBatchBytes": {
                **whole,
                "description": "Bytes a batch holds decoded; a batch is cut there (256Mi).",
            },
        },
    }


def _autoscale() -> dict[str, Any]:
    seconds = {"type": "number", "minimum": 0}
    return {
        "type": "object",
        "nullable": True,
        "description": "Replicas follow the lag of the streamlet's input, within bounds.",
        "properties": {
            "min": {"type": "integer", "minimum": 0, "description": "The fewest replicas."},
            "max": {"type": "integer", "minimum": 1, "description": "The most replicas."},
            "targetLag": {
                "type": "integer",
                "minimum": 1,
                "description": "The lag (records) one replica is meant to carry.",
            },
            "scaleUpAfter": {**seconds, "description": "Seconds a higher count must last."},
            "scaleDownAfter": {**seconds, "description": "Seconds a lower count must last."},
            "keda": {"type": "boolean", "description": "Let KEDA scale it, where installed."},
        },
    }


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


def _topic() -> dict[str, Any]:
    refs = {"type": "array", "items": _string(pattern=_PORT_REF)}
    return {
        "type": "object",
        "properties": {
            "producers": {**refs, "description": "streamlet.outlet references."},
            "consumers": {**refs, "description": "streamlet.inlet references."},
            "partitions": {"type": "integer", "minimum": 1},
            "replication": {"type": "integer", "minimum": 1},
            "config": _scalar_map("Kafka topic config, e.g. cleanup.policy."),
            "managed": {"type": "boolean", "description": "false: the topic must exist."},
            "format": _string(
                enum=[str(f) for f in TopicFormat],
                description="How records are encoded on the wire (default avro).",
            ),
            "register": {
                **_optional_string("May producers register their schema: auto or never."),
                "pattern": "^(" + "|".join(str(p) for p in RegisterPolicy) + ")$",
            },
        },
    }


def spec_schema() -> dict[str, Any]:
    """The OpenAPI v3 schema of ``spec``."""
    relative = "Relative to blueprintDir, the pods' working directory."
    return {
        "type": "object",
        "required": ["name", "image", "streamlets"],
        "properties": {
            "name": _string(
                pattern=_DNS_LABEL, maxLength=63, description="The application's name."
            ),
            "blueprintDir": _string(
                description="The blueprint's directory, relative to the application root of "
                "the image (/app): the pods' working directory."
            ),
            "source": _string(description="The blueprint's file name, in blueprintDir."),
            "image": _string(
                minLength=1,
                description="The streamlets' container image: the streamflow image with the "
                "project at /app.",
            ),
            "imagePullPolicy": _string(enum=["Always", "IfNotPresent", "Never"]),
            "resources": _resources("Default CPU and memory of every streamlet's pods."),
            "schemaPaths": {
                "type": "array",
                "items": _string(),
                "description": f"Where schemas are looked for. {relative}",
            },
            "pythonPaths": {
                "type": "array",
                "items": _string(),
                "description": f"Where streamlet modules are looked for. {relative}",
            },
            "kafka": {
                "type": "object",
                "properties": {
                    "bootstrap": _optional_string("Kafka bootstrap servers."),
                    "config": _scalar_map("librdkafka properties (no credentials)."),
                    "secret": _optional_string("The Secret that holds the Kafka credentials."),
                    "schemaRegistry": _optional_string("The schema registry URL."),
                    "register": _string(
                        enum=[str(p) for p in RegisterPolicy],
                        description="Topics' default register policy.",
                    ),
                },
            },
            "streamlets": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": _streamlet(),
            },
            "topics": {"type": "object", "additionalProperties": _topic()},
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
