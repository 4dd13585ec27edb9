"""Binding a streamlet's ports to topics and codecs for one application.

Resolved once at start-up, so the hot loop does dictionary lookups only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamflow.blueprint.plan import StreamletPlan
from streamflow.runtime.codecs import Codecs
from streamflow.schema.bounds import DEFAULT_LIMITS
from streamflow.schema.codecs import Codec
from streamflow.schema.store import SchemaStore

__all__ = ["Bindings", "OutletBinding", "bind"]


@dataclass(frozen=True)
class OutletBinding:
    outlet: str
    topic: str | None  # None: an unconnected outlet (its outputs are counted, not written)
    codec: Codec
    schema_header: bytes


@dataclass
class Bindings:
    inlets_by_topic: dict[str, tuple[str, Codec]] = field(default_factory=dict)
    controls_by_topic: dict[str, tuple[str, Codec]] = field(default_factory=dict)
    outlets: dict[str, OutletBinding] = field(default_factory=dict)
    dlq_topic: str = ""
    #: what one batch may hold decoded: the processor cuts a batch there
    max_batch_bytes: int = DEFAULT_LIMITS.max_batch_bytes


def bind(plan: StreamletPlan, store: SchemaStore, *, codecs: Codecs | None = None) -> Bindings:
    """Each port's topic and codec (chosen from the topic's format).

    Outlets on registry topics resolve their schema ids here, so a replica
    whose schema is not registered (or whose registry is down) fails at start,
    saying so, rather than at its first record.
    """
    descriptor = plan.descriptor
    out = Bindings(dlq_topic=plan.dlq_topic)
    codecs = codecs or Codecs(plan.app, store)
    limits = plan.spec.decode_limits
    out.max_batch_bytes = limits.max_batch_bytes

    for port in descriptor.inlets:
        topic = plan.topic(port.name)
        if topic is not None:
            out.inlets_by_topic[topic.name] = (
                port.name,
                codecs.for_topic(topic, port.schema, producing=False, limits=limits),
            )
    for port in descriptor.control_inlets:
        topic = plan.topic(port.name)
        if topic is not None:
            out.controls_by_topic[topic.name] = (
                port.name,
                codecs.for_topic(topic, port.schema, producing=False, limits=limits),
            )
    for port in descriptor.outlets:
        topic = plan.topic(port.name)
        out.outlets[port.name] = OutletBinding(
            outlet=port.name,
            topic=topic.name if topic else None,
            codec=codecs.for_topic(topic, port.schema, producing=True),
            schema_header=port.schema.encode(),
        )
    return out
