"""One streamlet of an application as its replicas run it, worked out once.

A replica needs a dozen answers from the :class:`Application`: its class's
descriptor, its parsed config, which topic each of its ports is on, its
guarantee, consumer group, dead-letter topic and changelogs. Asked where each
is used, the same lookups were made again and again (a topic search per port,
per question), and the naming rules (``<app>.<streamlet>`` for the group, and
so on) were only as consistent as every caller. A :class:`StreamletPlan` is
made once per streamlet with :meth:`StreamletPlan.of`, and the runtime (the
replica, its bindings, its state) reads it instead of the application.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from streamflow.api import config as config_mod
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.blueprint.model import EXACTLY_ONCE, Application, StreamletSpec, TopicSpec

__all__ = ["StreamletPlan"]


@dataclasses.dataclass(frozen=True)
class StreamletPlan:
    """What the replicas of one streamlet need to know of their application."""

    app: Application
    name: str
    spec: StreamletSpec
    descriptor: StreamletDescriptor
    config: Mapping[str, Any]  # parsed against the class's parameters
    topics: Mapping[str, TopicSpec]  # port -> its topic, for the connected ports
    group: str
    dlq_topic: str
    changelogs: Mapping[str, str]  # data inlet -> the compacted topic of its state

    @classmethod
    def of(cls, app: Application, streamlet: str) -> StreamletPlan:
        """The plan of ``streamlet``; KeyError when the application has none by that name,
        and the class's own errors (ConfigError, ClassLoadError) when it cannot be loaded."""
        spec = app.streamlets[streamlet]
        descriptor = app.descriptor(streamlet)
        ports = [*descriptor.inlets, *descriptor.control_inlets, *descriptor.outlets]
        topics = {
            port.name: topic
            for port in ports
            if (topic := app.topic_for(streamlet, port.name)) is not None
        }
        return cls(
            app=app,
            name=streamlet,
            spec=spec,
            descriptor=descriptor,
            config=MappingProxyType(config_mod.parse_config(descriptor, spec.config)),
            topics=MappingProxyType(topics),
            group=app.consumer_group(streamlet),
            dlq_topic=app.dlq_topic(streamlet),
            changelogs=MappingProxyType(
                {p.name: app.changelog_topic(streamlet, p.name) for p in descriptor.inlets}
            ),
        )

    @property
    def exactly_once(self) -> bool:
        return self.spec.guarantee == EXACTLY_ONCE

    @property
    def client_id_prefix(self) -> str:
        """``<app>.<streamlet>``: a replica's client id is this and its index."""
        return f"{self.app.name}.{self.name}"

    def topic(self, port: str) -> TopicSpec | None:
        """The topic ``port`` is connected to, if it is."""
        return self.topics.get(port)
