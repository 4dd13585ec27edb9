"""One reconcile of one application: observe, plan, execute, report.

Whatever wakes the operator (the resource created, its spec changed, one of
its Deployments changed or vanished, the periodic resync, an operator
restart), the same function runs on a fresh read of the resource:

1. the desired state is the spec, through the pure planner; the observed
   state is the Deployments labelled for the application (replicas from
   ``spec.replicas``, fingerprint from the pod template's checksum). An
   autoscaled streamlet's replicas are its autoscaler's, not the spec's
   (:mod:`~streamflow.operator.kubernetes.scaling`);
2. ``plan(desired, observed)`` gives the actions, and the executor applies them;
3. missing ConfigMaps and Services are put back (they are not in the plan,
   which is about pods), and KEDA's ScaledObjects are made to match;
4. the status is computed from the Deployments, and written only if it changed.

Before any of that, the resource is admitted (:mod:`~streamflow.operator.kubernetes.admission`):
security settings in its Kafka config, an unlabelled or bootstrap-less Secret,
or an image the operator does not admit (``--allowed-images``, by default its own
image's registry) fail it with nothing created and nothing sent to Kafka. Then it
is verified (:mod:`~streamflow.operator.kubernetes.verify`) with the CLI's verifier,
in a child process or a Job from the application's image: an application that
does not verify fails with its problems in the
``Verified`` condition, and the children of its last good spec, if any, are left
as they are; while the Job runs, the application is ``Pending``, ``Verifying``
(:mod:`~streamflow.operator.kubernetes.unapplied` writes these statuses). A spec
that passed is recorded in the status and not verified again, even after a
restart (:mod:`~streamflow.operator.kubernetes.recorded`). What the children
need of the classes (config with defaults, an ingress's port) comes from the
verifier too, so the operator never imports an application's code.

Because every step compares before it writes, a second reconcile of an
unchanged application writes nothing: an operator restart resumes without
repeating an action. Reconciles of one application never overlap (a lock
per application), since Deployment events arrive while a reconcile runs.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from streamflow.operator import planner
from streamflow.operator.kubernetes import (
    admission,
    classes,
    kafka,
    keda,
    names,
    recorded,
    resources,
    scaling,
    status,
    unapplied,
    verify,
    verify_job,
)
from streamflow.operator.kubernetes.client import api_message
from streamflow.operator.kubernetes.executor import Cluster, Executor
from streamflow.operator.kubernetes.rollout_entry import FIELD as ROLLOUTS
from streamflow.operator.kubernetes.spec import AppResource, SpecError, parse

__all__ = ["EventSink", "Outcome", "Reconciler"]

_LOG = logging.getLogger("streamflow.operator")
# Retry topics that could not be created at most this often (seconds).
_TOPICS_RETRY_S = 30.0
_CLASSES_LOADED = "ClassesLoaded"  # written by operators before verification, dropped now
_REASONS = {
    planner.Create: "Deployed",
    planner.Scale: "Scaled",
    planner.Roll: "Reconfigured",
    planner.Delete: "Removed",
}


class EventSink(Protocol):
    """Where Kubernetes Events about an application go (kopf's poster, in the operator)."""

    def info(self, resource: Mapping[str, Any], *, reason: str, message: str) -> None: ...

    def warn(self, resource: Mapping[str, Any], *, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class Outcome:
    """What one reconcile did: the actions applied and the status it found."""

    namespace: str
    name: str
    actions: list[planner.Action]
    repairs: list[str]
    status: dict[str, Any]


@dataclass
class _TopicsCheck:
    generation: int
    ok: bool
    at: float


@dataclass
class Reconciler:
    cluster: Cluster
    events: EventSink
    clock: Callable[[], float] = time.monotonic
    history: collections.deque[Outcome] = field(
        default_factory=lambda: collections.deque(maxlen=1000)
    )
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _topics: dict[tuple[str, str], _TopicsCheck] = field(default_factory=dict)
    # Whether the cluster serves KEDA's ScaledObjects; a cached discovery call unless given.
    keda_installed: Callable[[], bool] | None = None
    # Image patterns a resource may name (``--allowed-images``); empty: no image.
    allowed_images: tuple[str, ...] = ()
    # Runs the CLI's verifier on each spec: a child process (or a Job) per application.
    verifier: verify.AppVerifier = field(default_factory=verify.Verifier)

    def __post_init__(self) -> None:
        if self.keda_installed is None:
            cluster = self.cluster
            self.keda_installed = keda.Probe(
                lambda: cluster.serves(keda.GROUP, keda.VERSION, keda.PLURAL), clock=self.clock
            )

    def reconcile(self, namespace: str, name: str) -> Outcome | None:
        """Bring one application's children in line with its spec; None if it is gone.

        The topics are checked after the children are applied and outside the
        lock: an unreachable Kafka delays neither the pods nor the status.
        """
        with self.lock(namespace, name):
            body = self.cluster.get_app(namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                self._topics.pop((namespace, name), None)
                return None
            outcome, resource = self._reconcile(body)
            self.history.append(outcome)
            due = resource is not None and self._topics_due(resource)
            if resource is not None and due:  # claimed now, so concurrent reconciles skip it
                check = _TopicsCheck(resource.generation, False, self.clock())
                self._topics[(namespace, name)] = check
        if resource is not None and due:
            self._check_topics(body, resource)
        return outcome

    def lock(self, namespace: str, name: str) -> threading.Lock:
        """Held while one application's resource and children are read and written."""
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def _reconcile(self, body: dict[str, Any]) -> tuple[Outcome, AppResource | None]:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        generation = int(body["metadata"].get("generation") or 0)
        try:
            resource = parse(body)
        except SpecError as exc:
            return self._failed(body, generation, unapplied.Refusal("InvalidSpec", str(exc))), None
        refusal = admission.admit(
            resource, allowed_images=self.allowed_images, credentials=self.credentials
        )
        if refusal is not None:
            failure = unapplied.Refusal(refusal.reason, refusal.message)
            return self._failed(body, generation, failure), None
        if resource.app.kafka.secret:  # its data's digest rolls the pods when it is rotated
            secret = self.cluster.secret(resource.namespace, resource.app.kafka.secret)
            resource = dataclasses.replace(resource, secret_digest=kafka.secret_digest(secret))
        key = verify_job.spec_key(resource)
        verdict = recorded.restore(body.get("status"), key) or self.verifier.check(resource)
        held = verdict.pending is not None or verdict.error is not None
        if held and recorded.passed_before(body.get("status"), generation):
            # Verified and applied before: the verifier alone does not fail it or make it wait.
            reason = verdict.pending or verdict.error
            _LOG.info("%s/%s: verifying its spec again: %s", namespace, name, reason)
            return Outcome(namespace, name, [], [], dict(body.get("status") or {})), None
        if verdict.pending is not None:
            return self._verifying(body, generation, verdict.pending), None
        if not verdict.ok:
            return self._failed(body, generation, unapplied.unverified(verdict)), None
        facts = verdict.facts
        scalers = scaling.who_scales(resource.app, keda_installed=self.keda_for(body))
        try:
            actions, repairs, desired = self._apply(body, resource, facts, scalers)
            repairs += self._sync_scaled_objects(body, resource, scalers)
        except ApiException as exc:
            if exc.status in (409, 429) or exc.status >= 500:
                raise  # transient: the handler retries
            failure = unapplied.Refusal("ApplyFailed", api_message(exc))
            return self._failed(body, generation, failure), None
        deployments = self.cluster.deployments(namespace, name)
        autoscaling = scaling.condition(resource.app, scalers)
        previous = dict(body.get("status") or {})
        dropped = {_CLASSES_LOADED} | ({scaling.AUTOSCALING} if autoscaling is None else set())
        previous["conditions"] = [  # conditions no longer evaluated are not carried over
            c for c in previous.get("conditions") or [] if c.get("type") not in dropped
        ]
        new = status.build(
            generation=generation,
            desired=desired,
            deployments=deployments,
            conditions=[
                status.Condition("Reconciled", True, "Applied"),
                unapplied.verified(verdict.problems),
                *([autoscaling] if autoscaling else []),
            ],
            previous=previous,
            now=_now(),
        )
        entries = scaling.entries(resource.name, scalers, body.get("status"), deployments)
        if entries:
            new["autoscale"] = entries
        rollouts = {  # written by the rollout status; carried over while its streamlet is
            s: e for s, e in (previous.get(ROLLOUTS) or {}).items() if s in resource.app.streamlets
        }
        if rollouts:
            new[ROLLOUTS] = rollouts
        new[recorded.FIELD] = recorded.record(key, verdict)
        if self._write_status(body, new) and autoscaling and autoscaling.reason == "KedaMissing":
            before = status.condition(body.get("status"), scaling.AUTOSCALING) or {}
            if before.get("reason") != "KedaMissing":
                self.events.warn(body, reason="KedaMissing", message=autoscaling.message)
        return Outcome(namespace, name, actions, repairs, new), resource

    def credentials(self, resource: AppResource) -> dict[str, str] | None:
        """The properties of the resource's Secret; :class:`kafka.CredentialsError` if unusable."""
        name = resource.app.kafka.secret
        if not name:
            return None
        return kafka.credentials(self.cluster.secret(resource.namespace, name), name=name)

    def keda_for(self, body: Mapping[str, Any]) -> bool:
        """Whether KEDA scales what asks for it; the cluster is asked only when asked for."""
        streamlets = (body.get("spec") or {}).get("streamlets") or {}
        asks = any((s.get("autoscale") or {}).get("keda") for s in streamlets.values())
        return (asks or scaling.keda_recorded(body.get("status"))) and bool(
            self.keda_installed and self.keda_installed()
        )

    def _sync_scaled_objects(
        self, body: Mapping[str, Any], resource: AppResource, scalers: Mapping[str, str]
    ) -> list[str]:
        """KEDA's ScaledObjects for the streamlets KEDA scales, and none for the others."""
        ours = {s for s, by in scalers.items() if by == scaling.KEDA}
        if not ours and not scaling.keda_recorded(body.get("status")):
            return []
        existing = self.cluster.scaled_objects(resource.namespace, resource.name)
        repairs = []
        for streamlet in sorted(ours):
            topics = scaling.input_topics(resource.app, streamlet)
            wanted = keda.scaled_object(resource, streamlet, topics=topics)
            found = existing.get(streamlet)
            if found is None or not keda.same(found, wanted):
                self.cluster.put_scaled_object(wanted)
                repairs.append(f"scaledobject {streamlet}")
        for streamlet in sorted(set(existing) - ours):
            name = existing[streamlet]["metadata"]["name"]
            self.cluster.delete_scaled_object(resource.namespace, name)
            repairs.append(f"stray scaledobject {streamlet}")
        for repair in repairs:
            _LOG.info("%s/%s: %s", resource.namespace, resource.name, repair)
        return repairs

    def _apply(
        self,
        body: Mapping[str, Any],
        resource: AppResource,
        facts: Mapping[str, classes.Facts],
        scalers: Mapping[str, str],
    ) -> tuple[list[planner.Action], list[str], dict[str, int]]:
        """The actions applied, the repairs made, and the replicas wanted of each streamlet."""
        executor = Executor(self.cluster)
        namespace, name = resource.namespace, resource.name
        deployments = self.cluster.deployments(namespace, name)
        observed = {
            streamlet: planner.StreamletState(
                streamlet,
                int((d.get("spec") or {}).get("replicas") or 0),
                _template_checksum(d),
            )
            for streamlet, d in deployments.items()
        }
        entries = scaling.recorded(body.get("status"))
        replicas = {
            s: scaling.desired_replicas(
                resource.app,
                s,
                scaler=scalers.get(s),
                entry=entries.get(s),
                observed=observed[s].replicas if s in observed else None,
            )
            for s in resource.app.streamlets
        }
        desired = {
            s: planner.StreamletState(s, replicas[s], resources.checksum(resource, s))
            for s in resource.app.streamlets
        }
        actions = planner.plan(desired, observed)
        for action in actions:
            executor.apply(resource, action, facts.get(action.streamlet))
            _LOG.info("%s/%s: %s", namespace, name, action.describe())
            self.events.info(body, reason=_REASONS[type(action)], message=action.describe())
        return actions, self._repair(executor, resource, facts, actions), replicas

    def _repair(
        self,
        executor: Executor,
        resource: AppResource,
        facts: Mapping[str, classes.Facts],
        actions: list[planner.Action],
    ) -> list[str]:
        """Put back ConfigMaps and Services deleted by hand; drop stray Services."""
        touched = {a.streamlet for a in actions if isinstance(a, planner.Create | planner.Roll)}
        config_maps = self.cluster.config_maps(resource.namespace, resource.name)
        services = self.cluster.services(resource.namespace, resource.name)
        repairs: list[str] = []
        for streamlet in resource.app.streamlets:
            if streamlet in touched:
                continue
            if streamlet not in config_maps:
                executor.write_config(resource, streamlet, facts[streamlet])
                repairs.append(f"configmap {streamlet}")
            if executor.sync_service(
                resource, streamlet, facts[streamlet], services.get(streamlet)
            ):
                repairs.append(f"service {streamlet}")
        for streamlet in set(services) - set(resource.app.streamlets):
            self.cluster.delete(
                "Service", resource.namespace, names.child_name(resource.name, streamlet)
            )
            repairs.append(f"stray service {streamlet}")
        return repairs

    def _topics_due(self, resource: AppResource) -> bool:
        """Check the topics when the spec changed, or retry a failed check now and then."""
        last = self._topics.get((resource.namespace, resource.name))
        return (
            last is None
            or last.generation != resource.generation
            or (not last.ok and self.clock() - last.at >= _TOPICS_RETRY_S)
        )

    def _check_topics(self, body: Mapping[str, Any], resource: AppResource) -> None:
        created: list[str] = []
        try:
            settings = admission.client_settings(resource, credentials=self.credentials)
        except admission.RefusedError as exc:  # the Secret changed since the reconcile admitted it
            reason = exc.refusal.reason
            condition = status.Condition(kafka.TOPICS_READY, False, reason, str(exc))
        else:
            condition, created = kafka.ensure_topics(resource.app, settings)
        key = (resource.namespace, resource.name)
        self._topics[key] = _TopicsCheck(resource.generation, bool(condition.status), self.clock())
        if created:
            message = f"created topics: {', '.join(sorted(created))}"
            _LOG.info("%s/%s: %s", *key, message)
            self.events.info(body, reason="TopicsCreated", message=message)
        elif not condition.status:
            _LOG.warning("%s/%s: %s", *key, condition.message)
            self.events.warn(body, reason="TopicsNotReady", message=condition.message)
        with self.lock(*key):
            fresh = self.cluster.get_app(*key)
            if fresh is None:
                return
            previous = fresh.get("status") or {}
            conditions = status.merge_conditions(previous, [condition], now=_now())
            self._write_status(fresh, {**previous, "conditions": conditions})

    def _failed(
        self, body: Mapping[str, Any], generation: int, refusal: unapplied.Refusal
    ) -> Outcome:
        """Nothing was applied: say why in the status and as a Warning event."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        new = unapplied.failed(body, generation, refusal, now=_now())
        if self._write_status(body, new):
            _LOG.warning("%s/%s: %s", namespace, name, refusal.message)
            self.events.warn(body, reason=refusal.event, message=refusal.message)
        return Outcome(namespace, name, [], [], new)

    def _verifying(self, body: Mapping[str, Any], generation: int, what: str) -> Outcome:
        """The verifier's Job runs: nothing is applied yet; an event when it starts."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        new = unapplied.verifying(body, generation, what, now=_now())
        started = not unapplied.is_verifying(body.get("status"))
        if self._write_status(body, new) and started:
            _LOG.info("%s/%s: %s", namespace, name, new["message"])
            self.events.info(body, reason=unapplied.VERIFYING, message=new["message"])
        return Outcome(namespace, name, [], [], new)

    def _write_status(self, body: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        if body.get("status") == new:
            return False
        metadata = body["metadata"]
        self.cluster.patch_status(metadata["namespace"], metadata["name"], _with_nulls(body, new))
        return True


def _template_checksum(deployment: Mapping[str, Any]) -> str:
    template = (deployment.get("spec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(names.CHECKSUM_ANNOTATION, ""))


def _with_nulls(body: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that also removes streamlets no longer in the status (or autoscaled)."""
    patch = dict(new)
    for key in ("streamlets", "autoscale", ROLLOUTS):
        old = (body.get("status") or {}).get(key)
        if key in new:
            patch[key] = {**{s: None for s in old or {}}, **new[key]}
        elif old is not None:  # nothing autoscaled any more: no empty map left behind
            patch[key] = None
    return patch


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
