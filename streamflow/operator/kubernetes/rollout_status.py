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

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaException

from streamflow.blueprint.model import Application, TopicSpec
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.rollout_standing import Standing, standing
from streamflow.operator.kubernetes import admission, recorded, verify_job
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.reconcile import ROLLOUTS as FIELD
from streamflow.operator.kubernetes.reconcile import Reconciler
from streamflow.operator.kubernetes.spec import AppResource, SpecError, parse
from streamflow.operator.model_rollouts import read_decisions
from streamflow.operator.model_versions import DESCRIPTOR, end_offsets, read_all
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore

__all__ = ["FIELD", "RolloutStatus", "entry", "merge_patch", "shown"]

_LOG = logging.getLogger("streamflow.operator.rollouts")

Offsets = dict[str, dict[int, int]]  # topic -> partition -> end offset
# (the application, its serving streamlet) -> the status entry, or None when it serves none
Reader = Callable[[AppResource, str, Facts], dict[str, Any] | None]


@dataclass
class RolloutStatus:
    reconciler: Reconciler
    read: Reader | None = None  # the broker unless given (tests)
    # per (namespace, resource, streamlet): the topics' end offsets when last read, and
    # the entry read then
    _seen: dict[tuple[str, str, str], tuple[Offsets, dict[str, Any] | None]] = field(
        default_factory=dict
    )

    def tick(self, namespace: str, name: str) -> dict[str, Any]:
        """One round for one application: the entries written (none when nothing changed)."""
        cluster = self.reconciler.cluster
        body = cluster.get_app(namespace, name)
        resource = _parsed(body)
        serving = _serving(body, resource) if resource is not None else {}
        self._forget(namespace, name, keep=set(serving))
        if body is None or resource is None:
            return {}
        if admission.refuse_spec(resource, allowed_images=self.reconciler.allowed_images):
            return {}  # the reconcile reports it; no client is built for it here
        found: dict[str, dict[str, Any] | None] = {}
        for streamlet, facts in serving.items():
            try:
                found[streamlet] = (self.read or self._from_broker)(resource, streamlet, facts)
            except (KafkaException, RuntimeError, admission.RefusedError, ValueError) as exc:
                _LOG.warning("%s/%s: cannot read the rollout of %s: %s", namespace, name,
                             streamlet, exc)  # fmt: skip
        return self._record(namespace, name, found, keep=set(serving))

    def _record(
        self,
        namespace: str,
        name: str,
        found: Mapping[str, dict[str, Any] | None],
        *,
        keep: set[str],
    ) -> dict[str, Any]:
        cluster = self.reconciler.cluster
        with self.reconciler.lock(namespace, name):
            body = cluster.get_app(namespace, name)  # afresh: a reconcile may have written
            if body is None or body["metadata"].get("deletionTimestamp"):
                return {}
            before = dict((body.get("status") or {}).get(FIELD) or {})
            patch: dict[str, Any] = {s: None for s in before if s not in keep}
            patch |= {
                s: merge_patch(before.get(s), e)
                for s, e in found.items()
                if e is not None and before.get(s) != e
            }
            patch |= {s: None for s, e in found.items() if e is None and s in before}
            if patch:
                cluster.patch_status(namespace, name, {FIELD: patch})
        return patch

    def _from_broker(
        self, resource: AppResource, streamlet: str, facts: Facts
    ) -> dict[str, Any] | None:
        """Read from the topics only when they moved since the last read."""
        settings = admission.client_settings(resource, credentials=self.reconciler.credentials)
        if not settings.bootstrap:
            raise ValueError("spec.kafka.bootstrap is not set")
        clients = KafkaClients(bootstrap=settings.bootstrap, config=dict(settings.config))
        key = (resource.namespace, resource.name, streamlet)
        topics = [t for t in (facts.control_topic, *facts.decision_topics) if t]
        ends = {topic: end_offsets(clients, topic) for topic in topics}
        seen = self._seen.get(key)
        if seen is not None and seen[0] == ends:
            return seen[1]
        app = resource.app
        codecs = Codecs(app, SchemaStore())  # the built-in schemas: no class, no user file
        control = _topic(app, facts.control_topic)
        history = read_all(
            clients, control.name, codecs.for_topic(control, DESCRIPTOR, producing=False)
        )
        now = standing(history)
        decided = [_topic(app, name) for name in facts.decision_topics]
        decisions = read_decisions(clients, codecs, decided, now.model) if now.model else []
        found = entry(now, decisions[-1] if decisions else None)
        self._seen[key] = (ends, found)
        return found

    def _forget(self, namespace: str, name: str, *, keep: set[str]) -> None:
        for key in list(self._seen):  # a snapshot: other applications' ticks run too
            if key[:2] == (namespace, name) and key[2] not in keep:
                self._seen.pop(key, None)


def entry(now: Standing, decision: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``status.rollouts.<streamlet>`` from where the rollout stands and the newest decision."""
    if now.stable is None and now.candidate is None:
        return None
    out: dict[str, Any] = {"model": now.model}
    if now.stable is not None:
        out["stable"] = now.stable.version
    if now.candidate is not None and now.candidate.rollout is not None:
        rollout = now.candidate.rollout
        out["candidate"] = now.candidate.version
        out["mode"] = rollout.mode.value.lower()
        if rollout.splits:
            out["share"] = rollout.share
        if rollout.arms:
            out["arms"] = list(rollout.arms)
    if decision is not None:
        out["lastDecision"] = {
            "candidate": decision["candidate_version"],
            "sequence": decision["sequence"],
            "verdict": decision["verdict"],
            "step": decision["step"],
            "steps": decision["steps"],
            "mode": decision["mode"],
            "share": decision["share"],
            "reason": decision["reason"],
            "windows": decision["windows"],
        }
        decided = _time(decision.get("time"))
        if decided is not None:
            out["lastDecision"]["decidedAt"] = decided
    return out


def shown(entry: Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any] | None]:
    """What ``streamflow status`` shows of an entry: the model column as a replica says it
    (``wine:1 + candidate wine:2 (canary 25% of the keys)``), and the last decision as a
    ``RolloutDecision`` record's fields."""
    if not entry or "model" not in entry:
        return None, None
    model = str(entry["model"])
    said = f"{model}:{entry['stable']}" if "stable" in entry else None
    if "candidate" in entry and "mode" in entry:
        mode = RolloutMode(str(entry["mode"]).upper())
        plan = Rollout(mode, float(entry.get("share") or 0.0), tuple(entry.get("arms") or ()))
        candidate = f"candidate {model}:{entry['candidate']} ({plan.describe()})"
        said = f"{said} + {candidate}" if said else candidate
    last = entry.get("lastDecision")
    decision = None
    if isinstance(last, Mapping):
        decision = {
            "model": model,
            "candidate_version": last.get("candidate"),
            "verdict": last.get("verdict"),
            "step": last.get("step", 0),
            "steps": last.get("steps", 0),
            "mode": last.get("mode"),
            "windows": last.get("windows", 0),
            "reason": last.get("reason", ""),
        }
    return said, decision


def merge_patch(before: Any, after: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns ``before`` into ``after``: what ``after`` lacks is
    written as null (a merge patch keeps every key it does not name)."""
    old = before if isinstance(before, Mapping) else {}
    patch: dict[str, Any] = {key: None for key in old if key not in after}
    for key, value in after.items():
        nested = isinstance(value, Mapping) and isinstance(old.get(key), Mapping)
        patch[key] = merge_patch(old[key], value) if nested else value
    return patch


def _time(value: Any) -> str | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return None


def _topic(app: Application, name: str | None) -> TopicSpec:
    topic = app.topics.get(name or "")
    if topic is None:
        raise ValueError(f"topic {name!r} is not in the spec any more")
    return topic


def _serving(body: Mapping[str, Any] | None, resource: AppResource) -> dict[str, Facts]:
    """The serving streamlets the verifier found in this spec, with their facts."""
    verdict = recorded.restore((body or {}).get("status"), verify_job.spec_key(resource))
    if verdict is None:
        return {}
    return {
        name: facts
        for name, facts in verdict.facts.items()
        if facts.control_topic and name in resource.app.streamlets
    }


def _parsed(body: dict[str, Any] | None) -> AppResource | None:
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    try:
        return parse(body)
    except SpecError:
        return None  # the reconcile reports it
