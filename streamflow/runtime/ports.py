"""Binding a streamlet's ports to topics and codecs for one application.

Resolved once at start-up, so the hot loop does dictionary lookups only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.blueprint.model import Application
from streamflow.schema.codecs import Codec, SingleObjectCodec
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


def bind(app: Application, streamlet: str, store: SchemaStore) -> Bindings:
    descriptor: StreamletDescriptor = app.descriptor(streamlet)
    out = Bindings(dlq_topic=app.dlq_topic(streamlet))

    def codec(schema: str) -> Codec:
        return SingleObjectCodec(store.get(schema), store=store)

    for port in descriptor.inlets:
        topic = app.topic_for(streamlet, port.name)
        if topic is not None:
            out.inlets_by_topic[topic.name] = (port.name, codec(port.schema))
    for port in descriptor.control_inlets:
        topic = app.topic_for(streamlet, port.name)
        if topic is not None:
            out.controls_by_topic[topic.name] = (port.name, codec(port.schema))
    for port in descriptor.outlets:
        topic = app.topic_for(streamlet, port.name)
        out.outlets[port.name] = OutletBinding(
            outlet=port.name,
            topic=topic.name if topic else None,
            codec=codec(port.schema),
            schema_header=port.schema.encode(),
        )
    return out
