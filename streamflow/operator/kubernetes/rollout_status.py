"""``status.rollouts``: where each serving streamlet's model rollout stands, on the resource.

A periodic thread (:mod:`~streamflow.operator.kubernetes.periodic`) calls
:meth:`RolloutStatus.tick` every few seconds for each application. For each serving
streamlet the verifier found (its model control topic, and the topics its rollout
controllers decide on, in ``status.verified``), a tick:

1. reads the control topic and folds it as every replica does
   (:func:`~streamflow.models.rollout_standing.standing`): the stable version, and the
   candidate with its mode and share while a rollout runs;
2. reads the controllers' decisions (:class:`~streamflow.operator.model_rollouts.Rollouts`)
   and keeps the newest;
3. writes ``status.rollouts.<streamlet>`` under the reconciler's lock for the application,
   only when it changed, so an idle rollout patches nothing.

A topic is read again only when its end offsets moved, so a quiet rollout costs one
offsets request per topic per tick. The Kafka client is built from the application's
admitted settings, as for its topics (:func:`~.admission.client_settings`): a resource
that admission refuses is not read. Reading happens outside the lock; a failure is
logged and the next tick tries again, and the status keeps what it last said.

``kubectl get streamflowapplication NAME -o jsonpath='{.status.rollouts}'`` shows it;
the reconcile carries it over, as it does ``status.autoscale``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from streamflow.blueprint.model import Application, TopicSpec
from streamflow.models.rollout_standing import Standing, standing
from streamflow.operator.kubernetes import admission, recorded, verify_job
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.reconcile import Reconciler
from streamflow.operator.kubernetes.rollout_entry import FIELD, entry, patch
from streamflow.operator.kubernetes.spec import AppResource, parse_live
from streamflow.operator.model_rollouts import DECISION
from streamflow.operator.model_versions import DESCRIPTOR, ends_of, read_range
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore

__all__ = ["RolloutStatus"]

_LOG = logging.getLogger("streamflow.operator.rollouts")

Offsets = dict[str, dict[int, int]]  # topic -> partition -> end offset
# (the application, its serving streamlet) -> the status entry, or None when it serves none
Reader = Callable[[AppResource, str, Facts], dict[str, Any] | None]


@dataclass(frozen=True)
class _Read:
    ends: Offsets  # where the control and decision topics ended when read
    now: Standing
    newest: dict[str, dict[str, Any]]  # model -> its newest decision


@dataclass
class RolloutStatus:
    reconciler: Reconciler
    read: Reader | None = None  # the broker unless given (tests)
    # per (namespace, resource, its uid, streamlet): what was read, and where it ended
    _seen: dict[tuple[str, str, str, str], _Read] = field(default_factory=dict)

    def tick(self, namespace: str, name: str) -> dict[str, Any]:
        """One round for one application: the entries written (none when nothing changed)."""
        body = self.reconciler.cluster.get_app(namespace, name)
        resource = parse_live(body)
        serving = _serving(body, resource) if resource is not None else None
        if body is None or resource is None or serving is None:
            # gone, invalid, or its spec not verified as it is now: the status keeps
            # what it said until the verifier has spoken (the pods run the old spec)
            return {}
        uid = str(body["metadata"].get("uid") or "")
        self._forget(namespace, name, keep={(uid, s) for s in serving})
        if admission.refuse_spec(resource, allowed_images=self.reconciler.allowed_images):
            return {}  # the reconcile reports it; no client is built for it here
        found: dict[str, dict[str, Any] | None] = {}
        for streamlet, facts in serving.items():
            try:
                found[streamlet] = (self.read or self._from_broker)(resource, streamlet, facts)
            except (KafkaException, RuntimeError, admission.RefusedError, ValueError) as exc:
                _LOG.warning("%s/%s: cannot read the rollout of %s: %s", namespace, name,
                             streamlet, exc)  # fmt: skip
        if not patch(body, found, keep=set(serving)):
            return {}  # as the status says already: no second read, no lock
        return self._record(namespace, name, found)

    def _record(
        self, namespace: str, name: str, found: Mapping[str, dict[str, Any] | None]
    ) -> dict[str, Any]:
        cluster = self.reconciler.cluster
        with self.reconciler.lock(namespace, name):
            body = cluster.get_app(namespace, name)  # afresh: a reconcile may have written
            resource = parse_live(body)
            serving = _serving(body, resource) if resource is not None else None
            if body is None or serving is None:
                return {}
            mine = {s: e for s, e in found.items() if s in serving}
            written = patch(body, mine, keep=set(serving))
            if written:
                cluster.patch_status(namespace, name, {FIELD: written})
        return written

    def _from_broker(
        self, resource: AppResource, streamlet: str, facts: Facts
    ) -> dict[str, Any] | None:
        """Read what moved since the last read: the (compacted) control topic again when it
        did, the decision topics from where they ended (they only grow)."""
        settings = admission.client_settings(resource, credentials=self.reconciler.credentials)
        if not settings.bootstrap:
            raise ValueError("spec.kafka.bootstrap is not set")
        clients = KafkaClients(bootstrap=settings.bootstrap, config=dict(settings.config))
        key = (resource.namespace, resource.name, resource.uid, streamlet)
        app = resource.app
        control = _topic(app, facts.control_topic)
        decided = [_topic(app, name) for name in facts.decision_topics]
        ends = ends_of(clients, [topic.name for topic in [control, *decided]])
        last = self._seen.get(key)
        if last is not None and last.ends == ends:
            return entry(last.now, last.newest.get(last.now.model))
        if last is not None and (
            set(last.ends) != set(ends)  # the spec names other topics
            or any(  # or a topic was made anew: start over
                ends[t].get(p, 0) < at
                for t, offsets in last.ends.items()
                for p, at in offsets.items()
            )
        ):
            last = None
        codecs = Codecs(app, SchemaStore())  # the built-in schemas: no class, no user file
        read_to = {control.name: ends[control.name]}
        if last is not None and last.ends[control.name] == ends[control.name]:
            now = last.now
        else:
            codec = codecs.for_topic(control, DESCRIPTOR, producing=False)
            history, reached = read_range(clients, control.name, codec)
            now = standing(history)
            if reached != ends[control.name]:
                read_to[control.name] = {}  # read short: read it whole again next time
        newest = dict(last.newest) if last is not None else {}
        for topic in decided:
            codec = codecs.for_topic(topic, DECISION, producing=False)
            start = last.ends.get(topic.name) if last is not None else None
            records, read_to[topic.name] = read_range(clients, topic.name, codec, start)
            for decision in records:
                model = decision["model"]
                if model not in newest or _place(decision) > _place(newest[model]):
                    newest[model] = decision
        self._seen[key] = _Read(read_to, now, newest)
        return entry(now, newest.get(now.model))

    def _forget(self, namespace: str, name: str, *, keep: set[tuple[str, str]]) -> None:
        """Drop what was read for this application's other incarnations and streamlets."""
        for key in list(self._seen):  # a snapshot: other applications' ticks run too
            if key[:2] == (namespace, name) and key[2:] not in keep:
                self._seen.pop(key, None)


def _place(decision: Mapping[str, Any]) -> tuple[int, int]:
    """Where a decision falls: its candidate, then its number in that candidate's rollout."""
    return int(decision["candidate_version"]), int(decision["sequence"])


def _topic(app: Application, name: str | None) -> TopicSpec:
    topic = app.topics.get(name or "")
    if topic is None:
        raise ValueError(f"topic {name!r} is not in the spec any more")
    return topic


def _serving(body: Mapping[str, Any] | None, resource: AppResource) -> dict[str, Facts] | None:
    """The serving streamlets the verifier found in this spec, with their facts (None: the
    spec is not verified as it is now). The topics come from the verifier, which runs the
    application's own image: each is held to the spec's wiring, so a resource cannot send
    the operator to read a topic its streamlet does not follow, or one in a registry
    format (the operator has no registry of its own)."""
    verdict = recorded.restore((body or {}).get("status"), verify_job.spec_key(resource))
    if verdict is None:
        return None
    app = resource.app
    return {
        name: dataclasses.replace(facts, decision_topics=tuple(decided))
        for name, facts in verdict.facts.items()
        if name in app.streamlets
        and facts.control_topic
        and _wired(app, facts.control_topic, consumer=name)
        for decided in [
            [t for t in facts.decision_topics if _wired(app, t, producing_from=facts.control_topic)]
        ]
    }


def _wired(
    app: Application, topic: str, *, consumer: str | None = None, producing_from: str | None = None
) -> bool:
    """Whether ``topic`` is the spec's, without a registry, and consumed by ``consumer`` or
    produced by a streamlet that consumes ``producing_from``."""
    spec_ = app.topics.get(topic)
    if spec_ is None or spec_.format.uses_registry:
        return False
    if consumer is not None:
        return any(port.streamlet == consumer for port in spec_.consumers)
    followers = {port.streamlet for port in app.topics[producing_from or ""].consumers}
    return any(port.streamlet in followers for port in spec_.producers)
