"""The planner: what to do to make what runs match what is wanted. Pure.

``plan(desired, observed)`` compares two snapshots and returns the actions
that close the gap; it performs nothing, so it is tested without a cluster or
a process. Each executor (local processes, Kubernetes) turns the actions into
its own operations. A streamlet's *fingerprint* covers everything that, when
changed, needs its replicas restarted (class, config, guarantee, the topics its
ports are bound to, Kafka settings): a config change rolls only the streamlets
whose fingerprint changed, and replicas alone never roll anything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamflow.blueprint.model import Application

__all__ = [
    "Action",
    "Create",
    "Delete",
    "Roll",
    "Scale",
    "StreamletState",
    "desired_state",
    "fingerprint",
    "plan",
]


@dataclass(frozen=True)
class StreamletState:
    """One streamlet as wanted or as found: how many replicas, of which fingerprint."""

    name: str
    replicas: int
    fingerprint: str


@dataclass(frozen=True)
class Create:
    streamlet: str
    replicas: int
    fingerprint: str

    def describe(self) -> str:
        return f"create {self.streamlet} with {self.replicas} replica(s)"


@dataclass(frozen=True)
class Scale:
    streamlet: str
    replicas: int
    previous: int

    def describe(self) -> str:
        return f"scale {self.streamlet} from {self.previous} to {self.replicas}"


@dataclass(frozen=True)
class Roll:
    streamlet: str
    fingerprint: str
    replicas: int

    def describe(self) -> str:
        return f"roll {self.streamlet} (its configuration changed)"


@dataclass(frozen=True)
class Delete:
    streamlet: str

    def describe(self) -> str:
        return f"delete {self.streamlet}"


Action = Create | Scale | Roll | Delete


def fingerprint(app: Application, streamlet: str) -> str:
    """A digest of everything about a streamlet whose change needs a restart."""
    spec = app.streamlets[streamlet]
    bindings = sorted(
        (str(ref), topic.name)
        for topic in app.topics.values()
        for ref in (*topic.producers, *topic.consumers)
        if ref.streamlet == streamlet
    )
    material: dict[str, Any] = {
        "class": spec.class_path,
        "config": dict(spec.config),
        "guarantee": spec.guarantee,
        "dlq": app.dlq_topic(streamlet),
        "bindings": bindings,
        "kafka": {"bootstrap": app.kafka.bootstrap, "config": dict(app.kafka.config)},
        "schemas": list(app.schema_paths),
        "python": list(app.python_paths),
    }
    text = json.dumps(material, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def desired_state(app: Application) -> dict[str, StreamletState]:
    return {
        name: StreamletState(name, spec.replicas, fingerprint(app, name))
        for name, spec in app.streamlets.items()
    }


def plan(
    desired: Mapping[str, StreamletState], observed: Mapping[str, StreamletState]
) -> list[Action]:
    """The actions, in a safe order: deletions first, then rolls, scales and creations."""
    actions: list[Action] = [Delete(name) for name in sorted(set(observed) - set(desired))]
    for name in sorted(desired):
        want = desired[name]
        have = observed.get(name)
        if have is None:
            actions.append(Create(name, want.replicas, want.fingerprint))
        elif have.fingerprint != want.fingerprint:
            actions.append(Roll(name, want.fingerprint, want.replicas))
        elif have.replicas != want.replicas:
            actions.append(Scale(name, want.replicas, have.replicas))
    order = {Delete: 0, Roll: 1, Scale: 2, Create: 3}
    return sorted(actions, key=lambda a: order[type(a)])
