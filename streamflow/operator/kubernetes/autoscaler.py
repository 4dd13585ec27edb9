"""The operator's own autoscaler: measure the lag, decide, record; the reconcile applies.

A periodic thread (:mod:`~streamflow.operator.kubernetes.periodic`) calls
:meth:`Autoscaler.tick` every few seconds for each application that has an
autoscaled streamlet. For each streamlet the
operator scales (KEDA's are left to KEDA), a tick:

1. measures the consumer group's lag on the streamlet's data inlet topics,
   from the broker (:func:`streamflow.runtime.grouplag.measure`), with an
   admin client built from the application's Kafka settings and Secret, the
   same way the topics are created: through admission
   (:func:`~streamflow.operator.kubernetes.admission.client_settings`). A
   resource that admission refuses is not measured at all, so a
   ``plugin.library.paths`` the reconcile refused never reaches librdkafka here;
2. runs the pure policy (:func:`streamflow.operator.autoscale.decide`) on the
   count the operator last decided;
3. records the decision in ``status.autoscale.<streamlet>`` under the
   reconciler's lock for the application, so it never interleaves with a
   reconcile's read and write of the status; when the count changes, it posts
   an ``Autoscaled`` Event and runs a reconcile, which scales the Deployment
   the way every change of replicas goes (a planner ``Scale``).

Recording before applying means that a crash in between is repaired by the
next reconcile, which reads the decision back from the status.

The policy's memory (its ``History``: the last sample, what the windows
wanted, the measured throughput) lives in this process only, and starts over
when the streamlet's ``autoscale`` changes, as the local autoscaler's does:
old windows must not count towards new bounds. An operator
restart forgets it, which is safe: the windows start over (a scale-down
waits a whole ``scale_down_after`` again) and the rates are known again from
the second sample. The last decision itself survives, in the status.

Measuring happens outside the lock, so a slow or unreachable Kafka never holds
a reconcile up; a failure is logged and the next tick tries again. A change
of replicas is written at once, a mere change of numbers (the lag moving) at
most every ``record_every_s``, so a busy stream does not patch the API server
at every tick.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streamflow.blueprint.model import AutoscaleSpec
from streamflow.operator import autoscale
from streamflow.operator.kubernetes import admission, kafka, scaling
from streamflow.operator.kubernetes.reconcile import Reconciler
from streamflow.operator.kubernetes.spec import AppResource, parse_live
from streamflow.runtime import grouplag

__all__ = ["Autoscaler", "LagReader"]

_LOG = logging.getLogger("streamflow.operator.autoscaler")
_KAFKA_TIMEOUT_S = 5.0
_ADMIN_TTL_S = 300.0  # rebuild the admin client now and then: a Secret may have been rotated

# (the application, a streamlet, its data inlet topics) -> the group's lag on them
LagReader = Callable[[AppResource, str, list[str]], grouplag.GroupLag]
_Key = tuple[str, str, str]  # namespace, application resource, streamlet


@dataclass
class Autoscaler:
    reconciler: Reconciler
    read_lag: LagReader | None = None  # the broker's offsets unless given (tests)
    clock: Callable[[], float] = time.monotonic
    record_every_s: float = 15.0
    admin_factory: Callable[[dict[str, Any]], Any] = AdminClient  # a fake in tests
    # the policy's memory, with the spec it was gathered under
    _histories: dict[_Key, tuple[AutoscaleSpec, autoscale.History]] = field(default_factory=dict)
    _recorded_at: dict[_Key, float] = field(default_factory=dict)
    _admins: dict[tuple[str, str], tuple[str, float, Any]] = field(default_factory=dict)

    def tick(self, namespace: str, name: str) -> list[tuple[str, autoscale.Decision]]:
        """One round for one application; the decisions that changed a replica count."""
        body = self.reconciler.cluster.get_app(namespace, name)
        resource = parse_live(body)
        if body is None or resource is None:
            self.forget(namespace, name)
            return []
        refusal = admission.refuse_spec(resource, allowed_images=self.reconciler.allowed_images)
        if refusal is not None:  # the reconcile reports it; no client is built for it here
            _LOG.debug("%s/%s: not autoscaled: %s", namespace, name, refusal.message)
            self.forget(namespace, name)
            return []
        scalers = scaling.who_scales(resource.app, keda_installed=self.reconciler.keda_for(body))
        ours = sorted(s for s, by in scalers.items() if by == scaling.OPERATOR)
        self._keep_only(namespace, name, ours)
        samples = {s: sample for s in ours if (sample := self._sample(resource, s))}
        if not samples:
            return []
        changed = self._decide(namespace, name, samples)
        if changed:
            self.reconciler.reconcile(namespace, name)  # applies the recorded counts
        return changed

    def forget(self, namespace: str, name: str) -> None:
        self._keep_only(namespace, name, [])
        self._admins.pop((namespace, name), None)

    def _decide(
        self, namespace: str, name: str, samples: dict[str, autoscale.Sample]
    ) -> list[tuple[str, autoscale.Decision]]:
        cluster = self.reconciler.cluster
        changed: list[tuple[str, autoscale.Decision]] = []
        with self.reconciler.lock(namespace, name):
            body = cluster.get_app(namespace, name)  # afresh: a reconcile may have written
            resource = parse_live(body)
            if body is None or resource is None:
                return []
            deployments = cluster.deployments(namespace, name)
            recorded = scaling.recorded(body.get("status"))
            patch: dict[str, Any] = {}
            for streamlet, sample in samples.items():
                streamlet_spec = resource.app.streamlets.get(streamlet)  # removed since sampled?
                auto = streamlet_spec.autoscale if streamlet_spec is not None else None
                deployment = deployments.get(streamlet)
                if auto is None or deployment is None:
                    continue
                current = scaling.desired_replicas(
                    resource.app,
                    streamlet,
                    scaler=scaling.OPERATOR,
                    entry=recorded.get(streamlet),
                    observed=int((deployment.get("spec") or {}).get("replicas") or 0),
                )
                key = (namespace, name, streamlet)
                history = self._history(key, auto)
                decision, history = autoscale.decide(auto, sample, history, current=current)
                self._histories[key] = (auto, history)
                entry = scaling.decision_entry(decision, recorded.get(streamlet), now=_now())
                if self._due(key, entry, recorded.get(streamlet), changed=decision.changed):
                    patch[streamlet] = entry
                    self._recorded_at[key] = self.clock()
                if decision.changed:
                    changed.append((streamlet, decision))
                    message = (
                        f"{streamlet}: {current} -> {decision.replicas} replicas "
                        f"({decision.reason})"
                    )
                    _LOG.info("%s/%s: %s", namespace, name, message)
                    self.reconciler.events.info(body, reason="Autoscaled", message=message)
            if patch:
                cluster.patch_status(namespace, name, {"autoscale": patch})
        return changed

    def _history(self, key: _Key, auto: AutoscaleSpec) -> autoscale.History:
        """The policy's memory, anew when the spec changed: new bounds, new windows."""
        known = self._histories.get(key)
        return known[1] if known is not None and known[0] == auto else autoscale.History()

    def _due(
        self,
        key: _Key,
        entry: dict[str, Any],
        previous: dict[str, Any] | None,
        *,
        changed: bool,
    ) -> bool:
        if changed or previous is None or previous.get("by") != scaling.OPERATOR:
            return True
        if entry == previous:
            return False
        last = self._recorded_at.get(key)
        return last is None or self.clock() - last >= self.record_every_s

    def _sample(self, resource: AppResource, streamlet: str) -> autoscale.Sample | None:
        topics = scaling.input_topics(resource.app, streamlet)
        if not topics:
            return None
        read = self.read_lag or self._from_broker
        try:
            lag = read(resource, streamlet, topics)
        except (grouplag.GroupLagError, KafkaException, ValueError) as exc:
            _LOG.warning(
                "%s/%s: cannot measure the lag of %s: %s",
                resource.namespace,
                resource.name,
                streamlet,
                exc,
            )
            return None
        return autoscale.Sample(
            at=self.clock(),
            lag=lag.lag,
            produced=lag.produced,
            consumed=lag.consumed,
            partitions=lag.partitions,
        )

    def _from_broker(
        self, resource: AppResource, streamlet: str, topics: list[str]
    ) -> grouplag.GroupLag:
        """Per topic, so that ``partitions`` is the widest input's (what bounds the replicas)."""
        admin = self._admin(resource)
        group = resource.app.consumer_group(streamlet)
        each = [
            grouplag.measure(admin, group=group, topics=[topic], timeout=_KAFKA_TIMEOUT_S)
            for topic in topics
        ]
        return grouplag.GroupLag(
            lag=sum(m.lag for m in each),
            produced=sum(m.produced for m in each),
            consumed=sum(m.consumed for m in each),
            partitions=max(m.partitions for m in each),
        )

    def _admin(self, resource: AppResource) -> Any:
        key = (resource.namespace, resource.name)
        settings = json.dumps(dataclasses.asdict(resource.app.kafka), sort_keys=True, default=str)
        cached = self._admins.get(key)
        if cached and cached[0] == settings and self.clock() - cached[1] < _ADMIN_TTL_S:
            return cached[2]
        try:
            admitted = admission.client_settings(resource, credentials=self.reconciler.credentials)
        except admission.RefusedError as exc:
            raise grouplag.GroupLagError(str(exc)) from None
        if not admitted.bootstrap:
            raise grouplag.GroupLagError("spec.kafka.bootstrap is not set")
        admin = self.admin_factory(kafka.client_config(admitted, timeout=_KAFKA_TIMEOUT_S))
        self._admins[key] = (settings, self.clock(), admin)
        return admin

    def _keep_only(self, namespace: str, name: str, streamlets: list[str]) -> None:
        # list(): a snapshot taken at once, as other applications' timers run on other threads
        for store in (self._histories, self._recorded_at):
            for key in list(store):
                if key[:2] == (namespace, name) and key[2] not in streamlets:
                    store.pop(key, None)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
