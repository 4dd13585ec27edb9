"""The verifier that runs in Jobs (:mod:`~streamflow.operator.kubernetes.verify_job`).

**Never waiting.** :meth:`JobVerifier.check` answers at once: a verdict if the
answer is known, else ``pending`` (the application reports ``Verified``
Unknown, ``Verifying``). The Job's events wake the next reconcile (a handler in
:mod:`~streamflow.operator.kubernetes.handlers`), the periodic resync too. When
the Job is complete its pod's log is read (through the API server, with no
size cap, unlike a termination message): its answer line is the answer. The
answer is cached by the hash and the Job is deleted.

**Failing.** A pod that cannot start (its image cannot be pulled, its
container cannot be made: :data:`_FATAL_WAITING`) fails the verification at
once rather than at the deadline; a Job that failed (the verifier crashed, the
deadline passed) fails it with the pod's reason, exit code and the tail of its
log. Either way the Job is deleted, and a new one is tried after a back-off
that doubles (from ``retry_s`` up to ``retry_max_s``), or at once for a
changed spec. The cache is in memory; what survives a restart is the record of
the spec that passed, in the application's status
(:mod:`~streamflow.operator.kubernetes.recorded`).
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from streamflow.operator.kubernetes.client import api_message
from streamflow.operator.kubernetes.spec import AppResource
from streamflow.operator.kubernetes.verify import AnswerError, Verdict, read_answer
from streamflow.operator.kubernetes.verify_job import (
    CONTAINER,
    DEADLINE_S,
    SPEC_HASH_LABEL,
    TTL_S,
    job,
    job_name,
    selector,
    spec_key,
)

__all__ = ["JobCluster", "JobVerifier"]

# A container waiting for one of these will not start by waiting longer.
_FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
_TAIL_LINES = 5
_LINE_MAX = 300


class JobCluster(Protocol):
    """The API calls the Job verifier makes (:class:`~.executor.Cluster` has them)."""

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...

    def create_job(self, body: Mapping[str, Any]) -> None: ...

    def delete_job(self, namespace: str, name: str) -> None: ...

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...

    def pod_log(self, namespace: str, name: str, *, container: str) -> str: ...


@dataclass(frozen=True)
class _Failure:
    verdict: Verdict
    count: int
    retry_at: float


class JobVerifier:
    """Verifies each application in a Job from its image; never waits for one."""

    def __init__(
        self,
        cluster: JobCluster,
        *,
        deadline_s: int = DEADLINE_S,
        ttl_s: int = TTL_S,
        retry_s: float = 30.0,
        retry_max_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        cache_size: int = 256,
    ) -> None:
        self.cluster = cluster
        self.deadline_s = deadline_s
        self.ttl_s = ttl_s
        self.retry_s = retry_s
        self.retry_max_s = retry_max_s
        self.clock = clock
        self.created = 0  # Jobs created, for tests and metrics
        self._cache: collections.OrderedDict[str, Verdict] = collections.OrderedDict()
        self._failures: collections.OrderedDict[str, _Failure] = collections.OrderedDict()
        self._cache_size = cache_size
        self._guard = threading.Lock()

    def check(self, resource: AppResource) -> Verdict:
        """The verdict on ``resource``'s spec, or ``pending`` while its Job runs."""
        key = spec_key(resource)
        with self._guard:
            known = self._cache.get(key)
            if known is not None:
                self._cache.move_to_end(key)
                return known
            failure = self._failures.get(key)
            if failure is not None and self.clock() < failure.retry_at:
                return failure.verdict
        name = job_name(resource, key)
        found = self._current_job(resource, name)
        if found is None:
            return self._start(resource, name)
        if found["metadata"].get("deletionTimestamp"):
            return Verdict(pending=f"waiting for the previous job/{name} to be deleted")
        pod = self._pod(resource, found, key)
        finished = _finished(found)
        if finished is None:
            waiting = _waiting(pod)
            if waiting is not None and waiting[0] in _FATAL_WAITING:
                why = f"its pod cannot start: {_reason(waiting)}"
                return self._fail(resource, key, name, why)
            doing = f"job/{name} runs the verifier from {resource.pods.image}"
            return Verdict(pending=doing + (f" (pod: {_reason(waiting)})" if waiting else ""))
        if finished == "Complete":
            return self._read(resource, key, name, pod)
        return self._fail(resource, key, name, self._why_failed(resource, found, pod))

    # -- the steps ----------------------------------------------------------------

    def _current_job(self, resource: AppResource, name: str) -> dict[str, Any] | None:
        """The Job for this spec, if there is one; the application's others are superseded."""
        found = None
        for item in self.cluster.jobs(resource.namespace, selector(resource)):
            metadata = item.get("metadata") or {}
            if metadata.get("name") == name:
                found = item
            elif not metadata.get("deletionTimestamp"):
                self.cluster.delete_job(resource.namespace, str(metadata.get("name")))
        return found

    def _start(self, resource: AppResource, name: str) -> Verdict:
        body = job(resource, deadline_s=self.deadline_s, ttl_s=self.ttl_s)
        try:
            self.cluster.create_job(body)
        except ApiException as exc:
            if exc.status == 409:  # made meanwhile, or the failed one still going: next time
                return Verdict(pending=f"waiting for job/{name}")
            if exc.status == 429 or exc.status >= 500:
                raise  # transient: the reconcile is retried
            why = f"the verifier's Job cannot be created: {api_message(exc)}"
            return self._fail(resource, spec_key(resource), None, why)
        with self._guard:
            self.created += 1
        return Verdict(pending=f"job/{name} runs the verifier from {resource.pods.image}")

    def _pod(
        self, resource: AppResource, found: Mapping[str, Any], key: str
    ) -> dict[str, Any] | None:
        """The Job's newest pod (of this Job: an earlier one of the same name may linger)."""
        uid = found["metadata"].get("uid")
        pods = [
            pod
            for pod in self.cluster.pods(
                resource.namespace, f"{selector(resource)},{SPEC_HASH_LABEL}={key}"
            )
            if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or [])
        ]
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
        return pods[-1] if pods else None

    def _read(
        self, resource: AppResource, key: str, name: str, pod: Mapping[str, Any] | None
    ) -> Verdict:
        """The answer of a complete Job, cached; the Job is deleted either way."""
        if pod is None:
            return self._fail(resource, key, name, "its pod is gone, and its answer with it")
        try:
            output = self._log(resource, pod)
            verdict = read_answer(output)
        except ApiException as exc:
            return self._fail(resource, key, name, f"its log cannot be read: {api_message(exc)}")
        except AnswerError as exc:
            return self._fail(resource, key, name, f"{exc}{_tail(output)}")
        with self._guard:
            self._cache[key] = verdict
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            self._failures.pop(key, None)
        self.cluster.delete_job(resource.namespace, name)
        return verdict

    def _why_failed(
        self, resource: AppResource, found: Mapping[str, Any], pod: Mapping[str, Any] | None
    ) -> str:
        """The Job's reason, then the pod's: why it waited or how it ended, and its log's tail."""
        failed: Mapping[str, Any] = next(
            (c for c in (found.get("status") or {}).get("conditions") or [] if _is(c, "Failed")),
            {},
        )
        parts = [_reason((str(failed.get("reason") or "Failed"), str(failed.get("message") or "")))]
        waiting = _waiting(pod)
        if waiting is not None:
            parts.append(f"its pod waited: {_reason(waiting)}")
        ended = _terminated(pod)
        if ended is not None:
            parts.append(ended)
            with contextlib.suppress(ApiException):  # the reason and exit code say enough
                parts[-1] += _tail(self._log(resource, pod or {}))
        return "; ".join(parts)

    def _fail(self, resource: AppResource, key: str, name: str | None, why: str) -> Verdict:
        """Record the failure (retried after a back-off), and delete the Job."""
        where = f"job/{name}" if name else "the verifier"
        verdict = Verdict(error=f"{where} from {resource.pods.image} failed: {why}")
        with self._guard:
            count = self._failures[key].count + 1 if key in self._failures else 1
            delay = min(self.retry_s * 2 ** (count - 1), self.retry_max_s)
            self._failures[key] = _Failure(verdict, count, self.clock() + delay)
            self._failures.move_to_end(key)
            while len(self._failures) > self._cache_size:
                self._failures.popitem(last=False)
        if name is not None:
            self.cluster.delete_job(resource.namespace, name)
        return verdict

    def _log(self, resource: AppResource, pod: Mapping[str, Any]) -> str:
        name = pod["metadata"]["name"]
        return self.cluster.pod_log(resource.namespace, name, container=CONTAINER)


def _is(condition: Mapping[str, Any], kind: str) -> bool:
    return condition.get("type") == kind and condition.get("status") == "True"


def _finished(found: Mapping[str, Any]) -> str | None:
    """``Complete`` or ``Failed`` once the Job controller says so; None while it runs."""
    for condition in (found.get("status") or {}).get("conditions") or []:
        for kind in ("Complete", "Failed"):
            if _is(condition, kind):
                return kind
    return None


def _container_state(pod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return status.get("state") or {}
    return {}


def _waiting(pod: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """Why the verifier's container waits (ErrImagePull, ...), or why the pod is unscheduled."""
    waiting = _container_state(pod).get("waiting")
    if waiting:
        return str(waiting.get("reason") or "Waiting"), str(waiting.get("message") or "")
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("reason") or "Unschedulable"), str(
                condition.get("message") or ""
            )
    return None


def _terminated(pod: Mapping[str, Any] | None) -> str | None:
    ended = _container_state(pod).get("terminated")
    if not ended:
        return None
    return f"the verifier exited with {ended.get('exitCode')} ({ended.get('reason') or 'Error'})"


def _reason(pair: Sequence[str]) -> str:
    reason, message = pair
    return f"{reason}: {message}" if message else reason


def _tail(output: str) -> str:
    lines = [line[:_LINE_MAX] for line in output.splitlines() if line.strip()][-_TAIL_LINES:]
    return "; its log ends: " + " | ".join(lines) if lines else "; its log is empty"
