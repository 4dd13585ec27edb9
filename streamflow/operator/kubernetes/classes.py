"""What the operator learns from a streamlet's class: its config, whether it serves HTTP,
and which topics carry its models' rollout.

The children need two things only the class knows: the config with its
defaults filled in (the ConfigMap), and whether the streamlet is an HTTP
ingress (``Logic.SERVE``) and so needs a Service. The rollout status
(:mod:`~streamflow.operator.kubernetes.rollout_status`) needs a third: a serving
streamlet's model control topic, and the topics its rollout controllers write
their decisions to. :func:`facts` reads them from the class. The operator
calls it only in the verifier's child process
(:mod:`~streamflow.operator.kubernetes.verify_child`), after the application
verified, and receives plain :class:`Facts` back: the operator's own process
never imports an application's classes, so two applications whose modules
share a name cannot see each other's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamflow.api.config import config_problems
from streamflow.api.descriptor import ClassLoadError, DeclarationError, StreamletDescriptor
from streamflow.api.streamlet import Logic
from streamflow.blueprint.model import Application

__all__ = ["Facts", "facts"]


@dataclass(frozen=True)
class Facts:
    """One streamlet's class, as far as the operator could learn it."""

    config: dict[str, Any]
    http_port: int | None = None
    problems: list[str] = field(default_factory=list)
    unknown_class: str | None = None
    control_topic: str | None = None  # a serving streamlet's model control topic
    decision_topics: tuple[str, ...] = ()  # where its rollout controllers decide


def facts(app: Application, streamlet: str) -> Facts:
    """The resolved config (defaults filled in), the HTTP port if it serves, and any problems."""
    raw = dict(app.streamlets[streamlet].config)
    try:
        descriptor = app.descriptor(streamlet)
    except (ClassLoadError, DeclarationError, ImportError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        return Facts(config=raw, unknown_class=f"{streamlet}: {message}")
    problems = [f"{streamlet}: {p}" for p in config_problems(descriptor, raw)]
    resolved = {**_defaults(descriptor), **raw}
    control, decisions = _rollout_topics(app, streamlet)
    return Facts(
        config=resolved,
        http_port=_http_port(descriptor, resolved),
        problems=problems,
        control_topic=control,
        decision_topics=decisions,
    )


def _rollout_topics(app: Application, streamlet: str) -> tuple[str | None, tuple[str, ...]]:
    """A serving streamlet's control topic and its controllers' decision topics."""
    # here, not at the top: only the verifier's child asks, and the operator's other
    # importers (the CLI's Kubernetes target) need none of the models' machinery
    from streamflow.operator.model_rollouts import decision_topics
    from streamflow.operator.model_versions import ModelPushError, model_topics

    try:
        control, _ = model_topics(app, streamlet)
    except ModelPushError:  # it serves no model
        return None, ()
    return control.name, tuple(t.name for t in decision_topics(app, control.name))


def _defaults(descriptor: StreamletDescriptor) -> dict[str, Any]:
    return {p.name: p.default for p in descriptor.params if not p.required}


def _http_port(descriptor: StreamletDescriptor, config: dict[str, Any]) -> int | None:
    """The port an HTTP ingress listens on: its ``port`` parameter (0, "any", means none)."""
    if descriptor.logic != Logic.SERVE or descriptor.param("port") is None:
        return None
    try:
        port = int(config.get("port") or 0)
    except (TypeError, ValueError):
        return None
    return port if 0 < port < 65536 else None
