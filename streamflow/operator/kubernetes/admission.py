"""What a StreamflowApplication may ask of the operator, decided before anything is applied.

Whoever can create a StreamflowApplication makes the operator create pods
with the image it names, mount the Secret it names, and connect to Kafka
with that Secret's credentials. So creating one is equivalent to creating
pods, and the operator refuses what would reach further than that:

* **Kafka security comes from the Secret alone.** ``spec.kafka.config`` may
  not set ``security.protocol``, ``ssl.*``, ``sasl.*``, ``enable.ssl.*``,
  ``plugin.library.paths``, the bootstrap servers or any credential
  (:func:`streamflow.blueprint.kafka_keys.is_security`): otherwise the
  resource could turn certificate checks off, load a library into the
  operator, run ``sasl.kerberos.kinit.cmd``, or send the Secret's password
  to a broker of its choosing.
* **Only labelled Secrets hold credentials** (``streamflow.io/kafka-credentials=true``),
  and such a Secret names its brokers (``BOOTSTRAP``), which win over the
  spec's (:func:`streamflow.operator.kubernetes.kafka.credentials`).
* **Images** must match one of the operator's patterns (:func:`image_allowed`):
  those of ``--allowed-images``, else the registry its own image came from
  (:func:`own_registry`), else none. An operator that knows neither admits no
  image, rather than any: ``'*'`` (:data:`ANY_IMAGE`) admits any, and only
  when someone writes it.

A refusal is the application's ``Failed`` phase with a message that names
the key, the Secret or the image, and a Warning event; nothing is created.

No Kafka client is built from a resource without these checks: the reconcile's
topics, the autoscaler's lag readings, ``undeploy --delete-topics`` and the web
view all take their settings from :func:`client_settings`, the one place that
merges ``spec.kafka`` with the Secret, and only after refusing what it must.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamflow.blueprint import kafka_keys
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import kafka
from streamflow.operator.kubernetes.spec import AppResource

__all__ = [
    "ANY_IMAGE",
    "Credentials",
    "Refusal",
    "RefusedError",
    "admit",
    "allowed_images",
    "client_settings",
    "describe_allowed_images",
    "image_allowed",
    "own_registry",
    "refuse_config",
    "refuse_image",
    "refuse_spec",
]

# The pattern that admits any image: a glob, spelled out so that no default is ever it.
ANY_IMAGE = "*"
_GLOB = frozenset("*?[")
# Docker Hub: a bare name (``streamflow:1``) or one of these hosts is its registry, where
# anyone may publish, and whose ``library/`` holds every official image: never a default.
_DOCKER_HUB = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
_BOUNDARIES = ("/", ":", "@")
_HOST_BOUNDARIES = ("/",)  # after a registry host, ``:`` starts a port: another endpoint

# Reads the resource's Secret: its librdkafka properties, or None when it names none;
# raises kafka.CredentialsError when the Secret may not be used.
Credentials = Callable[[AppResource], Mapping[str, str] | None]


@dataclass(frozen=True)
class Refusal:
    """Why an application is not applied: a status reason and a message for its user."""

    reason: str
    message: str


class RefusedError(ValueError):
    """No Kafka client may be built for the resource; ``refusal`` says why."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def admit(
    resource: AppResource, *, allowed_images: Sequence[str], credentials: Credentials
) -> Refusal | None:
    """The first reason the resource may not be applied, or None when it may.

    ``credentials`` is called last, so a refused config or image reads no Secret.
    """
    refusal = refuse_spec(resource, allowed_images=allowed_images)
    if refusal is not None:
        return refusal
    try:
        credentials(resource)
    except kafka.CredentialsError as exc:
        return Refusal("SecretNotAllowed", str(exc))
    return None


def refuse_spec(resource: AppResource, *, allowed_images: Sequence[str]) -> Refusal | None:
    """What :func:`admit` refuses from the resource alone, reading no Secret."""
    return refuse_config(resource.app) or refuse_image(resource.pods.image, allowed_images)


def client_settings(resource: AppResource, *, credentials: Credentials) -> kafka.ClientSettings:
    """The settings of a Kafka client for the resource; :class:`RefusedError` when refused.

    ``spec.kafka.config``, then the Secret's properties, whose ``BOOTSTRAP`` wins
    over ``spec.kafka.bootstrap``: credentials go only to the brokers the
    Secret's author chose. The config is checked before the Secret is read.
    """
    app = resource.app
    refusal = refuse_config(app)
    if refusal is not None:
        raise RefusedError(refusal)
    try:
        secret = credentials(resource)
    except kafka.CredentialsError as exc:
        raise RefusedError(Refusal("SecretNotAllowed", str(exc))) from None
    config: dict[str, Any] = {**app.kafka.config, **(secret or {})}
    if app.kafka.bootstrap and "bootstrap.servers" not in (secret or {}):
        config["bootstrap.servers"] = app.kafka.bootstrap
    return kafka.ClientSettings(config)


def refuse_config(app: Application) -> Refusal | None:
    """Security settings in ``spec.kafka.config``, which only the Secret may set."""
    keys = sorted(key for key in app.kafka.config if kafka_keys.is_security(key))
    if not keys:
        return None
    return Refusal(
        "ForbiddenKafkaConfig",
        f"spec.kafka.config may not set {', '.join(keys)}: the connection's security, "
        "credentials and brokers come only from the Secret named in spec.kafka.secret "
        "(labelled streamflow.io/kafka-credentials=true)",
    )


def image_allowed(image: str, patterns: Sequence[str]) -> bool:
    """Whether ``image`` matches a pattern: a glob over the whole reference, or a prefix.

    A prefix ends at a boundary: ``registry.internal/streamflow`` admits
    ``registry.internal/streamflow:1.2`` and ``registry.internal/streamflow/x@sha256:…``
    but not ``registry.internal/streamflow-miner``. A pattern without ``/`` is a
    registry host, which only ``/`` ends: ``registry.internal`` admits
    ``registry.internal/x`` but not ``registry.internal:5000/x``, another endpoint.
    A glob's ``*`` crosses ``/``.
    """
    for pattern in patterns:
        if _GLOB & set(pattern):
            if fnmatch.fnmatchcase(image, pattern):
                return True
            continue
        boundaries = _BOUNDARIES if "/" in pattern else _HOST_BOUNDARIES
        if image == pattern or (
            image.startswith(pattern)
            and (pattern.endswith(boundaries) or image[len(pattern)] in boundaries)
        ):
            return True
    return False


def refuse_image(image: str, patterns: Sequence[str]) -> Refusal | None:
    """An image that matches none of ``patterns``; no patterns admit no image."""
    if image_allowed(image, patterns):
        return None
    if not patterns:
        return Refusal(
            "ImageNotAllowed",
            f"image {image!r} is not allowed: this operator admits no image until its "
            "administrator names the images it may run (--allowed-images)",
        )
    return Refusal(
        "ImageNotAllowed",
        f"image {image!r} is not allowed by this operator (allowed: {', '.join(patterns)}); "
        "use an image from there, or ask its administrator to add it to --allowed-images",
    )


def own_registry(image: str | None) -> str | None:
    """Where the operator's own image lives, up to its repository's last ``/``; None for none.

    ``ghcr.io/acme/streamflow:1`` gives ``ghcr.io/acme/``, the prefix that
    ``streamflow build --tag $REGISTRY/...`` gives the applications' images too.
    Docker Hub's bare names and ``library/`` (everyone's official images) give None.
    """
    if not image:
        return None
    repository = image.partition("@")[0]
    registry, slash, _ = repository.rpartition("/")
    if not slash:
        return None
    host, _, path = registry.partition("/")
    if host.lower() in _DOCKER_HUB and path in ("", "library"):
        return None
    return registry + "/"


def allowed_images(given: Sequence[str], *, own_image: str | None) -> tuple[str, ...]:
    """The operator's patterns: those given, else its own image's registry, else none."""
    if given:
        return tuple(given)
    registry = own_registry(own_image)
    return (registry,) if registry else ()


def describe_allowed_images(given: Sequence[str], *, own_image: str | None) -> str:
    """What the operator says at start about the images it admits, and why those."""
    patterns = allowed_images(given, own_image=own_image)
    if ANY_IMAGE in patterns:
        return (
            f"admits any image (--allowed-images '{ANY_IMAGE}'): whoever may create a "
            "StreamflowApplication chooses what its pods run"
        )
    if given:
        return f"admits the images matching {', '.join(patterns)} (--allowed-images)"
    if patterns:
        return (
            f"admits the images under {patterns[0]}, the registry of its own image "
            f"{own_image} (--allowed-images names others)"
        )
    why = (
        f"its own image {own_image} names no registry of its own"
        if own_image
        else "its own image is unknown (STREAMFLOW_OPERATOR_IMAGE)"
    )
    return (
        f"admits no image: {why}; name the images it may run with --allowed-images, "
        f"or '{ANY_IMAGE}' for any"
    )
