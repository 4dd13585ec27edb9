"""One reconcile of one application: observe, plan, execute, report.

Whatever wakes the operator (the resource created, its spec changed, one of
its Deployments changed or vanished, the periodic resync, an operator
restart), the same function runs on a fresh read of the resource:

1. the desired state is the spec, through the pure planner; the observed
   state is the Deployments labelled for the application (replicas from
   ``spec.replicas``, fingerprint from the pod template's checksum);
2. ``plan(desired, observed)`` gives the actions, and the executor applies them;
3. missing ConfigMaps and Services are put back (they are not in the plan,
   which is about pods);
4. the status is computed from the Deployments, and written only if it changed.

Because every step compares before it writes, a second reconcile of an
unchanged application writes nothing: an operator restart resumes without
repeating an action. Reconciles of one application never overlap (a lock
per application), since Deployment events arrive while a reconcile runs.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from streamflow.operator import planner
from streamflow.operator.kubernetes import classes, kafka, names, resources, status
from streamflow.operator.kubernetes.client import api_message
from streamflow.operator.kubernetes.executor import Cluster, Executor
from streamflow.operator.kubernetes.spec import AppResource, SpecError, parse

__all__ = ["EventSink", "Outcome", "Reconciler"]

_LOG = logging.getLogger("streamflow.operator")
# Retry topics that could not be created at most this often (seconds).
_TOPICS_RETRY_S = 30.0
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

    def reconcile(self, namespace: str, name: str) -> Outcome | None:
        """Bring one application's children in line with its spec; None if it is gone.

        The topics are checked after the children are applied and outside the
        lock: an unreachable Kafka delays neither the pods nor the status.
        """
        with self._lock(namespace, name):
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

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def _reconcile(self, body: dict[str, Any]) -> tuple[Outcome, AppResource | None]:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        generation = int(body["metadata"].get("generation") or 0)
        try:
            resource = parse(body)
        except SpecError as exc:
            return self._failed(body, generation, "InvalidSpec", str(exc)), None
        facts = {s: classes.facts(resource.app, s) for s in resource.app.streamlets}
        problems = [p for f in facts.values() for p in f.problems]
        if problems:
            message = "invalid config: " + "; ".join(problems)
            return self._failed(body, generation, "InvalidConfig", message), None
        try:
            actions, repairs = self._apply(body, resource, facts)
        except ApiException as exc:
            if exc.status in (409, 429) or exc.status >= 500:
                raise  # transient: the handler retries
            return self._failed(body, generation, "ApplyFailed", api_message(exc)), None
        desired = {s: spec.replicas for s, spec in resource.app.streamlets.items()}
        deployments = self.cluster.deployments(namespace, name)
        new = status.build(
            generation=generation,
            desired=desired,
            deployments=deployments,
            conditions=[
                status.Condition("Reconciled", True, "Applied"),
                _classes_condition(facts),
            ],
            previous=body.get("status"),
            now=_now(),
        )
        self._write_status(body, new)
        return Outcome(namespace, name, actions, repairs, new), resource

    def _apply(
        self, body: Mapping[str, Any], resource: AppResource, facts: Mapping[str, classes.Facts]
    ) -> tuple[list[planner.Action], list[str]]:
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
        desired = {
            s: planner.StreamletState(s, spec.replicas, resources.checksum(resource, s))
            for s, spec in resource.app.streamlets.items()
        }
        actions = planner.plan(desired, observed)
        for action in actions:
            executor.apply(resource, action, facts.get(action.streamlet))
            _LOG.info("%s/%s: %s", namespace, name, action.describe())
            self.events.info(body, reason=_REASONS[type(action)], message=action.describe())
        return actions, self._repair(executor, resource, facts, actions)

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
        secret = None
        if resource.app.kafka.secret:
            data = self.cluster.secret_data(resource.namespace, resource.app.kafka.secret)
            secret = kafka.secret_config(data)
        condition, created = kafka.ensure_topics(resource.app, secret=secret)
        key = (resource.namespace, resource.name)
        self._topics[key] = _TopicsCheck(resource.generation, bool(condition.status), self.clock())
        if created:
            message = f"created topics: {', '.join(sorted(created))}"
            _LOG.info("%s/%s: %s", *key, message)
            self.events.info(body, reason="TopicsCreated", message=message)
        elif not condition.status:
            _LOG.warning("%s/%s: %s", *key, condition.message)
            self.events.warn(body, reason="TopicsNotReady", message=condition.message)
        with self._lock(*key):
            fresh = self.cluster.get_app(*key)
            if fresh is None:
                return
            previous = fresh.get("status") or {}
            conditions = status.merge_conditions(previous, [condition], now=_now())
            self._write_status(fresh, {**previous, "conditions": conditions})

    def _failed(
        self, body: Mapping[str, Any], generation: int, reason: str, message: str
    ) -> Outcome:
        """Nothing was applied: say why in the status and as a Warning event."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        previous = body.get("status") or {}
        new = {
            **previous,
            "phase": status.FAILED,
            "message": message,
            "observedGeneration": generation,
            "conditions": status.merge_conditions(
                previous, [status.Condition("Reconciled", False, reason, message)], now=_now()
            ),
        }
        new.setdefault("ready", f"0/{len((body.get('spec') or {}).get('streamlets') or {})}")
        if self._write_status(body, new):
            _LOG.warning("%s/%s: %s", namespace, name, message)
            self.events.warn(body, reason="Failed", message=message)
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


def _classes_condition(facts: Mapping[str, classes.Facts]) -> status.Condition:
    unknown = [f.unknown_class for f in facts.values() if f.unknown_class]
    if not unknown:
        return status.Condition("ClassesLoaded", True, "Imported")
    message = (
        "; ".join(unknown) + ". The operator cannot import these classes: their config is "
        "not checked, and no Service is made for them"
    )
    return status.Condition("ClassesLoaded", False, "ImportFailed", message)


def _with_nulls(body: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that also removes streamlets no longer in the status."""
    patch = dict(new)
    old = (body.get("status") or {}).get("streamlets") or {}
    if "streamlets" in new:
        patch["streamlets"] = {**{s: None for s in old}, **new["streamlets"]}
    return patch


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
