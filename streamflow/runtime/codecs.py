"""The one place that picks a port's codec: from its topic's format.

The runtime's bindings, ``tail``, ``model push`` and the ingresses all ask a
:class:`Codecs` for the codec of a (topic, schema), so a topic is read and
written the same way by every part of streamflow. The registry client is
made on first need and shared, so its caches serve every port of a process.
"""

from __future__ import annotations

from streamflow.blueprint.model import Application, TopicSpec
from streamflow.runtime import registry as registries
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits
from streamflow.schema.codecs import Codec, JsonTopicCodec, SingleObjectCodec
from streamflow.schema.formats import RegisterPolicy, TopicFormat, subject_for
from streamflow.schema.registry import Registry, RegistryAvroCodec, RegistryJsonCodec
from streamflow.schema.store import SchemaStore

__all__ = ["Codecs"]


class Codecs:
    def __init__(
        self, app: Application, store: SchemaStore, *, registry: Registry | None = None
    ) -> None:
        self.app = app
        self.store = store
        self._registry = registry

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = registries.connect(self.app.kafka.schema_registry)
        return self._registry

    def for_topic(
        self,
        topic: TopicSpec | None,
        schema_name: str,
        *,
        producing: bool,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> Codec:
        """The codec of a port on ``topic`` (None: an unconnected port, Avro as default).

        ``limits`` bound what a record it decodes may declare (:mod:`streamflow.schema.bounds`).

        A producing registry codec has its schema id resolved (or registered)
        here, at start-up, so encoding never waits on the registry; this raises
        :class:`~streamflow.schema.registry.SchemaNotRegistered` or
        :class:`~streamflow.schema.registry.RegistryUnavailable` if it cannot.
        """
        schema = self.store.get(schema_name)
        fmt = topic.format if topic is not None else TopicFormat.AVRO
        if fmt is TopicFormat.AVRO:
            return SingleObjectCodec(schema, store=self.store, limits=limits)
        if fmt is TopicFormat.JSON:
            return JsonTopicCodec(schema, limits=limits)
        assert topic is not None
        register = self.app.register_policy(topic) is RegisterPolicy.AUTO
        codec: RegistryAvroCodec | RegistryJsonCodec
        if fmt is TopicFormat.AVRO_REGISTRY:
            codec = RegistryAvroCodec(
                schema,
                self.registry,
                subject=subject_for(topic.name),
                register=register,
                store=self.store,
                limits=limits,
            )
        else:
            codec = RegistryJsonCodec(
                schema,
                self.registry,
                subject=subject_for(topic.name),
                register=register,
                limits=limits,
            )
        if producing:
            codec.prepare()
        return codec
