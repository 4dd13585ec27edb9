"""Rollouts for a running application: a candidate beside the stable model, by records.

The use case behind ``streamflow model rollout``, on a serving streamlet's control
topic (:class:`~streamflow.operator.model_versions.ModelChannel`):

* :meth:`Rollouts.start` writes a candidate: the next version's descriptor with a
  ``rollout`` (shadow, canary or AB), keyed ``<model>#candidate``;
* :meth:`Rollouts.change` writes the same candidate again with another mode or share
  (the replicas change the split, with no load);
* :meth:`Rollouts.promote` writes the candidate as the stable descriptor (keyed by the
  model's name; the replicas adopt the loaded candidate), then the candidate's end;
* :meth:`Rollouts.abort` writes the candidate's end (the replicas unload it).

Each record is whole: compaction keeps the latest per key, a stable one and a candidate,
and a replica that starts later replays the same state (see
:mod:`streamflow.models.rollout`). Where the rollout stands is read back from the topic
the same way (:func:`standing`), so these commands need no state of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from streamflow.blueprint.model import Application, TopicSpec
from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.rollout_policy import Policy
from streamflow.models.rollout_standing import (
    Standing,
    changed,
    control_key,
    ending,
    promotion,
    standing,
)
from streamflow.operator.model_versions import (
    ModelChannel,
    ModelPushError,
    Pushed,
    PushRequest,
    end_offsets,
    produce_descriptors,
    read_range,
)
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore

__all__ = [
    "DECISION",
    "DecisionFeed",
    "Rollouts",
    "Standing",
    "blueprint_policy",
    "controllers",
    "decision_topics",
    "read_decisions",
    "standing",
]

DECISION = "streamflow.ml.RolloutDecision"


class Rollouts:
    """The rollout commands of one serving streamlet (see the module docstring)."""

    def __init__(self, channel: ModelChannel) -> None:
        self.channel = channel

    def standing(self, model: str | None = None) -> Standing:
        return standing(self.channel.history(), model)

    def decisions(self, model: str, candidate: int | None = None) -> list[dict[str, Any]]:
        """The rollout controllers' decisions about ``model`` (of one candidate version, if
        given), oldest first: read from every topic a streamlet that follows this control
        topic writes ``RolloutDecision`` records to (none: no controller runs)."""
        channel = self.channel
        app = channel.app
        topics = decision_topics(app, channel.control.name)
        codecs = Codecs(app, SchemaStore(app.schema_paths))
        return read_decisions(channel.clients, codecs, topics, model, candidate)

    def feed(self) -> DecisionFeed:
        """The decisions as they come (see :class:`DecisionFeed`)."""
        app = self.channel.app
        topics = decision_topics(app, self.channel.control.name)
        return DecisionFeed(
            self.channel.clients, Codecs(app, SchemaStore(app.schema_paths)), topics
        )

    def start(self, request: PushRequest, rollout: Rollout) -> Pushed:
        """A candidate: the next version, beside the stable one, meeting what ``rollout``
        says. Refused when no stable version runs, or a rollout runs already."""
        _check(rollout)
        history = self.channel.history()
        now = standing(history, request.name)
        if now.stable is None:
            raise ModelPushError(
                "no stable version to roll out against",
                hint="push one first: streamflow model push",
            )
        if now.candidate is not None:
            raise ModelPushError(
                f"{now.model}:{now.candidate.version} is rolling out already",
                hint="promote or abort it first (streamflow model rollout promote|abort)",
            )
        newest = max((d["version"] for d in history if d["name"] == now.model), default=0)
        version = request.version if request.version is not None else newest + 1
        if version <= now.stable.version:
            raise ModelPushError(
                f"version {version} is not newer than the stable version {now.stable.version}"
            )
        descriptor = request.descriptor(now.model, version)
        return self._write([dataclasses.replace(descriptor, rollout=rollout)])

    def change(self, rollout: Rollout, model: str | None = None) -> Pushed:
        """The running candidate, to meet what ``rollout`` says now."""
        _check(rollout)
        candidate = self._candidate(model)
        return self._write([changed(candidate, rollout)])

    def promote(self, model: str | None = None) -> Pushed:
        """The candidate becomes the stable version on every replica (no second load)."""
        candidate = self._candidate(model)
        records = promotion(candidate)
        return self._write(records, awaited=records[0])

    def abort(self, model: str | None = None) -> Pushed:
        """The candidate leaves every replica; the stable version meets every record."""
        return self._write([ending(self._candidate(model))])

    def _candidate(self, model: str | None) -> ModelDescriptor:
        now = self.standing(model)
        if now.candidate is None:
            raise ModelPushError(
                f"no rollout of {now.model or 'a model'} runs",
                hint="start one: streamflow model rollout start",
            )
        return now.candidate

    def _write(
        self, descriptors: list[ModelDescriptor], awaited: ModelDescriptor | None = None
    ) -> Pushed:
        channel = self.channel
        start = end_offsets(channel.clients, channel.status.name) if channel.status else {}
        records = [
            (control_key(descriptor), channel.descriptors.encode(descriptor.to_record()))
            for descriptor in descriptors
        ]
        produce_descriptors(channel.clients, channel.control.name, records)
        shown = awaited or descriptors[0]
        return Pushed(
            model=shown.name,
            version=shown.version,
            kind=str(shown.kind),
            size=len(shown.data or b""),
            topic=channel.control.name,
            status_start=start,
            role="stable" if shown.rollout is None else "candidate",
        )


def read_decisions(
    clients: KafkaClients,
    codecs: Codecs,
    topics: Iterable[TopicSpec],
    model: str,
    candidate: int | None = None,
) -> list[dict[str, Any]]:
    """The decisions about ``model`` (of one candidate version, if given) on ``topics``,
    oldest first; a decision read twice (a controller's retry) is one."""
    return DecisionFeed(clients, codecs, list(topics)).read(model, candidate)


class DecisionFeed:
    """Decisions read on from where the last read ended: a watcher that asks every few
    seconds reads each record once, however long the topics have grown."""

    def __init__(self, clients: KafkaClients, codecs: Codecs, topics: list[TopicSpec]) -> None:
        self.clients, self.codecs, self.topics = clients, codecs, topics
        self._at: dict[str, dict[int, int]] = {}
        self._said: set[tuple[int, int]] = set()

    def read(self, model: str, candidate: int | None = None) -> list[dict[str, Any]]:
        """The decisions about ``model`` (of ``candidate``) not read before, oldest first."""
        found: list[dict[str, Any]] = []
        for topic in self.topics:
            codec = self.codecs.for_topic(topic, DECISION, producing=False)
            records, self._at[topic.name] = read_range(
                self.clients, topic.name, codec, self._at.get(topic.name)
            )
            found += records
        mine = [
            d
            for d in found
            if d["model"] == model and (candidate is None or d["candidate_version"] == candidate)
        ]
        ordered = []
        for decision in sorted(mine, key=lambda d: (d["candidate_version"], d["sequence"])):
            place = (decision["candidate_version"], decision["sequence"])
            if place not in self._said:
                self._said.add(place)
                ordered.append(decision)
        return ordered


def controllers(app: Application, control: str) -> list[str]:
    """The rollout controllers of ``control``'s model: the streamlets with a control inlet
    on that topic and an outlet of RolloutDecision."""
    found = []
    for name in app.streamlets:
        descriptor = app.descriptor(name)
        follows = any(
            (topic := app.topic_for(name, port.name)) is not None and topic.name == control
            for port in descriptor.control_inlets
        )
        if follows and any(port.schema == DECISION for port in descriptor.outlets):
            found.append(name)
    return found


def decision_topics(app: Application, control: str) -> list[TopicSpec]:
    """The topics the rollout controllers of ``control``'s model write their decisions to."""
    found: list[TopicSpec] = []
    for name in controllers(app, control):
        for port in app.descriptor(name).outlets:
            topic = app.topic_for(name, port.name)
            if port.schema == DECISION and topic is not None and topic not in found:
                found.append(topic)
    return found


def blueprint_policy(app: Application, control: str) -> Policy | None:
    """The policy a controller of ``control``'s model follows for a candidate that brings
    none (its ``policy`` config), or None."""
    for name in controllers(app, control):
        raw = app.streamlets[name].config.get("policy")
        if raw:
            return Policy.from_mapping(raw)
    return None


def _check(rollout: Rollout) -> None:
    if rollout.mode is RolloutMode.END:
        raise ModelPushError("END is written by promote and abort, not started")
    refusal = rollout.refusal()
    if refusal:
        raise ModelPushError(refusal)
