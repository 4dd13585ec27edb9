"""The verifier's pass over topics: which ports they connect, and how.

A topic's producers must be outlets and its consumers inlets (a control inlet
is an inlet too); every port connects to at most one topic; every inlet must
be connected (a streamlet cannot run with nothing to read) while an unconnected
outlet is only a warning. A control inlet replays its topic from the start, so
that topic should be compacted, or a new replica replays all history.
"""

from __future__ import annotations

from collections.abc import Mapping

from streamflow.api.descriptor import PortDescriptor, StreamletDescriptor
from streamflow.api.ports import PortKind
from streamflow.blueprint.model import PortRef
from streamflow.blueprint.report import Reporter, did_you_mean
from streamflow.blueprint.structure import PortUse, StreamletDraft, TopicDraft

__all__ = ["check_control_topics", "check_port_uses", "check_unconnected", "resolve_port"]

_INLET_KINDS = (PortKind.INLET, PortKind.CONTROL_INLET)


def resolve_port(
    use: PortUse, descriptors: Mapping[str, StreamletDescriptor]
) -> PortDescriptor | None:
    """The port a use names, if its streamlet's class loaded and has that port."""
    descriptor = descriptors.get(use.ref.streamlet)
    return descriptor.port(use.ref.port) if descriptor is not None else None


def check_port_uses(
    topics: Mapping[str, TopicDraft],
    *,
    streamlets: Mapping[str, StreamletDraft],
    descriptors: Mapping[str, StreamletDescriptor],
    report: Reporter,
) -> None:
    """Every producer and consumer names a real port, facing the right way, once."""
    bound: dict[PortRef, str] = {}
    for topic in topics.values():
        for use in (*topic.producers, *topic.consumers):
            if use.ref.streamlet not in streamlets:
                report.error(
                    "unknown-streamlet",
                    f"topic {topic.name}: {use.ref} names streamlet {use.ref.streamlet!r}, "
                    "which is not in the blueprint",
                    use.node,
                    hint=did_you_mean(
                        str(use.ref), [f"{name}.{use.ref.port}" for name in streamlets]
                    ),
                )
                continue
            descriptor = descriptors.get(use.ref.streamlet)
            if descriptor is not None:
                _check_direction(use, descriptor, report)
            _check_bound_once(use, bound, report)


def _check_direction(use: PortUse, descriptor: StreamletDescriptor, report: Reporter) -> None:
    port = descriptor.port(use.ref.port)
    wanted = (PortKind.OUTLET,) if use.role == "producer" else _INLET_KINDS
    if port is None:
        candidates = [
            f"{use.ref.streamlet}.{p.name}"
            for p in (*descriptor.inlets, *descriptor.control_inlets, *descriptor.outlets)
            if p.kind in wanted
        ]
        listing = ", ".join(candidates) or "none"
        report.error(
            "unknown-port",
            f"topic {use.topic}: streamlet {use.ref.streamlet} ({descriptor.class_path}) has "
            f"no port {use.ref.port!r}; its {'outlets' if use.role == 'producer' else 'inlets'}"
            f": {listing}",
            use.node,
            hint=did_you_mean(str(use.ref), candidates),
        )
    elif use.role == "producer" and port.kind not in wanted:
        report.error(
            "producer-not-outlet",
            f"topic {use.topic}: {use.ref} is an {port.kind}, so it cannot produce to a topic",
            use.node,
            hint="list it under consumers, or name one of the streamlet's outlets",
        )
    elif use.role == "consumer" and port.kind not in wanted:
        report.error(
            "consumer-not-inlet",
            f"topic {use.topic}: {use.ref} is an {port.kind}, so it cannot consume a topic "
            "(only inlets and control inlets can)",
            use.node,
            hint="list it under producers, or name one of the streamlet's inlets",
        )


def _check_bound_once(use: PortUse, bound: dict[PortRef, str], report: Reporter) -> None:
    first = bound.get(use.ref)
    if first is None:
        bound[use.ref] = use.topic
    elif first == use.topic:
        report.error(
            "duplicate-port-ref",
            f"topic {use.topic}: {use.ref} is listed more than once",
            use.node,
            hint="remove the repeated entry",
        )
    else:
        report.error(
            "port-bound-to-many-topics",
            f"{use.ref} is connected to topic {first} and to topic {use.topic}; "
            "a port connects to exactly one topic",
            use.node,
            hint="to feed several consumers, list them all under one topic's consumers",
        )


def check_unconnected(
    streamlets: Mapping[str, StreamletDraft],
    *,
    topics: Mapping[str, TopicDraft],
    descriptors: Mapping[str, StreamletDescriptor],
    report: Reporter,
) -> None:
    """An inlet without a topic is an error; an outlet without one a warning (unless it
    is optional)."""
    connected = {use.ref for t in topics.values() for use in (*t.producers, *t.consumers)}
    for name, descriptor in descriptors.items():
        draft = streamlets[name]
        for port in (*descriptor.inlets, *descriptor.control_inlets):
            if PortRef(name, port.name) not in connected:
                kind = "control inlet" if port.kind == PortKind.CONTROL_INLET else "inlet"
                report.error(
                    "unconnected-inlet",
                    f"{kind} {name}.{port.name} ({port.schema}) is not connected to any topic",
                    draft.key,
                    hint=f"add {name}.{port.name} to the consumers of a topic",
                )
        for port in descriptor.outlets:
            if PortRef(name, port.name) not in connected and not port.optional:
                report.warning(
                    "unconnected-outlet",
                    f"outlet {name}.{port.name} ({port.schema}) is not connected to any topic; "
                    "what it writes is dropped",
                    draft.key,
                    hint=f"add {name}.{port.name} to the producers of a topic",
                )


def check_control_topics(
    topics: Mapping[str, TopicDraft],
    *,
    descriptors: Mapping[str, StreamletDescriptor],
    report: Reporter,
) -> None:
    """A topic read by a control inlet should be compacted, so its replay stays short."""
    for topic in topics.values():
        controls = [
            use
            for use in topic.consumers
            if (port := resolve_port(use, descriptors)) is not None
            and port.kind == PortKind.CONTROL_INLET
        ]
        if controls and not topic.compacted:
            report.warning(
                "control-topic-not-compacted",
                f"topic {topic.name} feeds the control inlet {controls[0].ref}, which replays "
                "it from the start, but it is not compacted",
                topic.key,
                hint="add config: {cleanup.policy: compact}",
            )
