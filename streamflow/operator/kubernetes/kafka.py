"""The operator's side of Kafka: creating an application's topics, with its credentials.

Topics are created by the operator with the AdminClient, never by the pods,
and never deleted by it: deleting an application keeps its data (``streamflow
undeploy --delete-topics`` asks for that explicitly). When the operator
cannot reach the bootstrap servers (they may resolve only inside the
cluster's network), the application is still deployed and the ``TopicsReady``
condition says why the topics were not checked; the operator tries again later.

Credentials live only in the Secret that ``spec.kafka.secret`` names, and
only a Secret labelled ``streamflow.io/kafka-credentials=true`` may be named:
the operator can read every Secret of its namespaces, and a resource must not
be able to point it at one that was never meant for Kafka. Its keys are
librdkafka properties written as environment variable names, upper case with
``_`` for ``.`` (``SASL_PASSWORD`` is ``sasl.password``), because the pods
receive them as ``STREAMFLOW_KAFKA_<KEY>`` variables. ``BOOTSTRAP`` is
required and wins over ``spec.kafka.bootstrap``: credentials go only to the
brokers the Secret's author chose.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes.status import Condition
from streamflow.runtime import topics

__all__ = [
    "CREDENTIALS_LABEL",
    "TOPICS_READY",
    "ClientSettings",
    "CredentialsError",
    "client_config",
    "credentials",
    "ensure_topics",
    "property_name",
    "secret_config",
    "secret_digest",
]

TOPICS_READY = "TopicsReady"
CREDENTIALS_LABEL = "streamflow.io/kafka-credentials"


class CredentialsError(ValueError):
    """The named Secret may not be used for Kafka credentials; the message says why."""


_LOG = logging.getLogger("streamflow.operator.kafka")


def property_name(key: str) -> str:
    """The librdkafka property of a Secret key: ``SASL_PASSWORD`` -> ``sasl.password``."""
    if key.upper() == "BOOTSTRAP":
        return "bootstrap.servers"
    return key.lower().replace("_", ".")


#: a Secret's keys that are not librdkafka's: the pods read them for the schema
#: registry's client (``runtime.registry``); given to a Kafka client, they break it
NOT_KAFKA_KEYS = ("SCHEMA_REGISTRY_",)


def secret_config(data: Mapping[str, str] | None) -> dict[str, str]:
    """librdkafka properties from a Secret's (base64) data; undecodable values are skipped,
    and so are the keys that are not for Kafka (``SCHEMA_REGISTRY_USER_INFO``)."""
    out: dict[str, str] = {}
    for key, value in (data or {}).items():
        if key.upper().startswith(NOT_KAFKA_KEYS):
            continue
        try:
            out[property_name(key)] = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
    return out


def credentials(secret: Mapping[str, Any] | None, *, name: str) -> dict[str, str]:
    """The librdkafka properties of a Secret that may hold Kafka credentials.

    :class:`CredentialsError` when it is missing, unlabelled, or names no brokers.
    Nothing of the Secret's values is ever put in a message.
    """
    if secret is None:
        raise CredentialsError(
            f"Secret {name!r} (spec.kafka.secret) does not exist or the operator may not read it"
        )
    labels = (secret.get("metadata") or {}).get("labels") or {}
    if labels.get(CREDENTIALS_LABEL) != "true":
        raise CredentialsError(
            f"Secret {name!r} (spec.kafka.secret) is not labelled {CREDENTIALS_LABEL}=true, "
            "so it may not hold Kafka credentials; if it is meant to, label it: kubectl label "
            f"secret {name} {CREDENTIALS_LABEL}=true"
        )
    config = secret_config(secret.get("data"))
    if not config.get("bootstrap.servers"):
        raise CredentialsError(
            f"Secret {name!r} (spec.kafka.secret) has no BOOTSTRAP key: a Secret's "
            "credentials go only to the brokers it names"
        )
    return config


def secret_digest(secret: Mapping[str, Any] | None) -> str:
    """A digest of a Secret's data: it changes when the credentials are rotated.

    It goes into the pods' checksum (never the data itself), because a pod
    reads a Secret through ``envFrom`` only when it starts: without it, new
    credentials would reach no pod until something else rolled it.
    """
    data = (secret or {}).get("data") or {}
    text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16] if data else ""


@dataclass(frozen=True)
class ClientSettings:
    """The librdkafka properties of an application's clients, as admission let them through.

    Only :func:`streamflow.operator.kubernetes.admission.client_settings` makes
    one: it refuses security settings in ``spec.kafka.config`` and reads only a
    labelled Secret. Every client the operator builds from a resource takes one
    (:func:`client_config`), so no path can build a client from a refused resource.
    """

    config: Mapping[str, Any]

    @property
    def bootstrap(self) -> str | None:
        return self.config.get("bootstrap.servers") or None


def client_config(settings: ClientSettings, *, timeout: float = 5.0) -> dict[str, Any]:
    """An admin client's config: the admitted settings, failing within ``timeout``."""
    config = dict(settings.config)
    # Keep librdkafka from retrying an unreachable broker past our own timeout, and
    # route its complaints through logging rather than straight to stderr.
    config.setdefault("socket.connection.setup.timeout.ms", int(timeout * 1000))
    config["logger"] = _LOG
    return config


def ensure_topics(
    app: Application, settings: ClientSettings, *, timeout: float = 5.0
) -> tuple[Condition, list[str]]:
    """Create the missing topics; the ``TopicsReady`` condition, and the names created."""
    config = client_config(settings, timeout=timeout)
    if not config.get("bootstrap.servers"):
        return Condition(
            TOPICS_READY,
            False,
            "NoBootstrap",
            "spec.kafka.bootstrap is not set, so the topics cannot be created",
        ), []
    try:
        admin = AdminClient(config)
        report = topics.ensure_topics(admin, app, timeout=timeout)
    except topics.TopicsError as exc:
        return Condition(TOPICS_READY, False, "TopicsInvalid", str(exc)), []
    except (KafkaException, ValueError) as exc:
        where = config["bootstrap.servers"]
        message = f"cannot reach Kafka at {where} to create the topics: {_kafka_message(exc)}"
        return Condition(TOPICS_READY, False, "KafkaUnreachable", message), []
    message = f"{len(report.created) + len(report.existing)} topics exist"
    if report.created:
        message += f" ({len(report.created)} created)"
    if report.warnings:
        message += "; " + "; ".join(report.warnings)
    return Condition(TOPICS_READY, True, "TopicsExist", message), list(report.created)


def _kafka_message(exc: Exception) -> str:
    error = exc.args[0] if exc.args else exc
    describe = getattr(error, "str", None)
    return str(describe()) if callable(describe) else str(error)
