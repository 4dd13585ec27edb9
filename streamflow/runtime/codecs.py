"""The one place that picks a port's codec: from its topic's format.

The runtime's bindings, ``tail``, ``model push`` and the ingresses all ask a
:class:`Codecs` for the codec of a (topic, schema), so a topic is read and
written the same way by every part of streamflow. The registry client is
made on first need and shared, so its caches serve every port of a process.

A subject that streamflow creates (``register: auto``) for a topic the
application also consumes is given a level that protects those consumers
(:func:`~streamflow.schema.formats.consumer_compatibility`) before the first
schema goes in, so no other producer can later register one they cannot read.
A subject that exists already is someone's: its level is left alone, and
``verify --registry`` warns when it does not protect the consumers.
"""

from __future__ import annotations

import logging

from streamflow.blueprint.model import Application, TopicSpec
from streamflow.runtime import registry as registries
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits
from streamflow.schema.codecs import Codec, JsonTopicCodec, SingleObjectCodec
from streamflow.schema.formats import (
    RegisterPolicy,
    TopicFormat,
    consumer_compatibility,
    subject_for,
)
from streamflow.schema.registry import Registry, RegistryRefused
from streamflow.schema.registry_codecs import RegistryAvroCodec, RegistryJsonCodec
from streamflow.schema.store import SchemaStore

__all__ = ["Codecs"]

log = logging.getLogger("streamflow.runtime")


class Codecs:
    def __init__(
        self, app: Application, store: SchemaStore, *, registry: Registry | None = None
    ) -> None:
        self.app = app
        self.store = store
        self._registry = registry
        self._protected: set[str] = set()  # subjects already seen to, by this process

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
            if register and topic.consumers:
                self._protect(topic)
            codec.prepare()
        return codec

    def _protect(self, topic: TopicSpec) -> None:
        """Give a subject we are about to create the level that protects its consumers.

        Before the first registration, so there is no moment when another producer
        could slip in a schema they cannot read. Replicas racing here set the same
        level. A registry that refuses the change (its owner locks levels) does not
        stop the start: the schema is still registered, and the log says why.
        """
        subject = subject_for(topic.name)
        if subject in self._protected:
            return
        if self.registry.latest(subject) is not None:  # may raise: asked again on a retry
            self._protected.add(subject)
            return  # someone's subject: verify warns if its level does not protect us
        level = consumer_compatibility(topic.config)
        try:
            self.registry.set_compatibility(subject, level)
            self._protected.add(subject)
        except RegistryRefused as exc:
            self._protected.add(subject)
            log.warning(
                "could not set subject %s to %s, which would keep producers from "
                "registering schemas its consumers cannot read: %s",
                subject,
                level,
                exc,
            )
            return
        log.info("created subject %s with compatibility %s", subject, level)
