"""The ``Target`` protocol every backend implements, and the values it speaks in.

The CLI's ``deploy``, ``status``, ``scale``, ``configure``, ``logs`` and
``undeploy`` speak to a :class:`Target` and never to a backend directly, so
both backends answer with the same words and the same data. Backends raise
:class:`TargetError` for anything a user can cause; the CLI prints it and
exits 1.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streamflow.blueprint.model import Application
from streamflow.operator import planner
from streamflow.operator.targets.status import AppStatus  # `status` is a method name below

__all__ = ["Change", "LogLine", "Target", "TargetError"]


class TargetError(Exception):
    """A user's request that cannot be carried out; ``problems`` lists each reason."""

    def __init__(self, message: str, *, hint: str = "", problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Change:
    """What a deploy, scale or configure asked for: the new spec, the planned actions."""

    app: Application
    actions: tuple[planner.Action, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogLine:
    replica: str
    text: str


class Target(Protocol):
    """A place applications run. Names are application names; errors are TargetError."""

    kind: str

    def deploy(self, app: Application, *, bootstrap: str | None) -> Change: ...

    def undeploy(self, name: str, *, delete_topics: bool) -> Sequence[str]:
        """Stop and remove the application; the topics it deleted (only when asked)."""
        ...

    def status(self, name: str) -> AppStatus: ...

    def application(self, name: str) -> Application:
        """The desired spec, as last deployed, scaled or configured."""
        ...

    def scale(self, name: str, replicas: Mapping[str, int]) -> Change: ...

    def configure(self, name: str, settings: Mapping[str, Any]) -> Change:
        """Apply ``{"streamlet.param": raw value}``; validated first (TargetError)."""
        ...

    def configuration(self, name: str) -> dict[str, dict[str, Any]]: ...

    def kafka_client_config(self, name: str) -> dict[str, Any]:
        """The librdkafka properties a Kafka client of the application is made with.

        Its ``kafka.config`` and credentials as that target hands them to its
        replicas, ``bootstrap.servers`` included when known (local: the
        environment's ``STREAMFLOW_KAFKA_*``; kubernetes: the labelled Secret,
        after the operator's admission checks, TargetError when they refuse).
        """
        ...

    def logs(
        self,
        name: str,
        streamlet: str,
        *,
        follow: bool,
        replica: int | None = None,
        tail: int | None = None,
    ) -> Iterator[LogLine]: ...

    def list(self) -> Sequence[AppStatus]: ...
