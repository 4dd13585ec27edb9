"""Ports: the typed ends of a streamlet that topics connect to.

A port is declared as a class attribute and names its schema by full name.
Its port name defaults to the attribute name, so ``scores = Outlet(schema=...)``
is the port ``scores``; ``Inlet("in", ...)`` sets it explicitly (``in`` is a
Python keyword and cannot be an attribute).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

__all__ = [
    "KEEP_KEY",
    "ControlInlet",
    "Emit",
    "Inlet",
    "KeyFunction",
    "Outlet",
    "Port",
    "PortKind",
]

KeyFunction = Callable[[dict[str, Any]], "str | None"]


class _KeepKey:
    """Sentinel: the output keeps the key of the input that produced it."""

    def __repr__(self) -> str:
        return "KEEP_KEY"


KEEP_KEY: Final = _KeepKey()


class PortKind(enum.StrEnum):
    """Which way a port faces; the value is what descriptors and messages show."""

    INLET = "inlet"
    CONTROL_INLET = "control-inlet"
    OUTLET = "outlet"


class Port:
    """A named, schema-typed port. Subclasses say which direction it faces."""

    kind: ClassVar[PortKind]

    def __init__(
        self, name: str | None = None, schema: str | None = None, *, description: str = ""
    ) -> None:
        self.name: str = name or ""
        self.schema: str = schema or ""
        self.description = description
        self.attribute: str = ""

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute
        if not self.name:
            self.name = attribute.replace("_", "-")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.schema!r})"


class Inlet(Port):
    """A data inlet: replicas of the streamlet share its partitions (one consumer group)."""

    kind = PortKind.INLET


class ControlInlet(Port):
    """A broadcast inlet: every replica reads every record, replayed from the start.

    Use it for state that all replicas must agree on, such as the current model.
    Its topic should be compacted, so a replica that starts later can replay it.
    """

    kind = PortKind.CONTROL_INLET


class Outlet(Port):
    """An outlet. ``key`` picks the Kafka key of each record written to it.

    Without ``key`` an output keeps the key of the input record that produced it
    (and is unkeyed when written by an ingress). An ``optional`` outlet need not be
    connected: ``verify`` does not warn of it (what it writes then is dropped).
    """

    kind = PortKind.OUTLET

    def __init__(
        self,
        name: str | None = None,
        schema: str | None = None,
        *,
        key: KeyFunction | None = None,
        description: str = "",
        optional: bool = False,
    ) -> None:
        super().__init__(name, schema, description=description)
        self.key = key
        self.optional = optional

    def __call__(
        self,
        value: dict[str, Any],
        *,
        key: str | _KeepKey | None = KEEP_KEY,
        headers: dict[str, str] | None = None,
    ) -> Emit:
        """An output for this outlet: ``return self.scores({"score": 0.9})``."""
        return Emit(self.name, value, key, headers)


@dataclass(frozen=True, slots=True)
class Emit:
    """One output record addressed to an outlet, with an optional explicit key."""

    outlet: str
    value: dict[str, Any]
    key: str | _KeepKey | None = KEEP_KEY
    headers: dict[str, str] | None = None
