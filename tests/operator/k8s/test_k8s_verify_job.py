"""The verifier as a Job from the application's image (``--verify-in job``), without a cluster.

The Job's body is pinned directly (it runs as the application's replicas run,
needs no Kafka, is owned, bounded and named by its spec). The verifier's
states are driven on an in-memory stand-in for the Job calls of
:class:`~streamflow.operator.kubernetes.executor.Cluster` whose Jobs finish
when a test says so, with the log a test gives: the answer of the real child,
run here exactly as the Job's container runs it, but over this checkout. No
clock is waited on: the back-off runs on a fake one. On the test control plane
an application gets its Job and reports ``Verifying`` (its nodes run nothing,
so a pod quota of 0 keeps the Job from ever running, rather than a race).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import (
    job_verifier,
    names,
    resources,
    spec,
    unapplied,
    verify,
    verify_job,
)
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.reconcile import Reconciler
from streamflow.operator.kubernetes.verify import CHILD_MODULE
from streamflow.operator.kubernetes.verify_child import REQUEST_ENV, decode_request, encode_request
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import (
    POLL_S,
    TEST_IMAGE,
    WAIT_S,
    OperatorThread,
    get_json,
    make_application,
)
from tests.operator.k8s.test_k8s_autoscale_units import Events, FakeCluster
from tests.waiting import wait_until

ROOT = Path(__file__).parents[3]
IMAGE = "reg.example/wine:1"


@pytest.fixture(scope="module")
def app() -> Application:
    return make_application(bootstrap="kafka:9092")


def body_of(app: Application, *, image: str = IMAGE) -> dict[str, Any]:
    body = spec.body(app, namespace="prod", pods=spec.PodSettings(image=image))
    body["metadata"].update(uid="u-1", generation=1)
    return body


def resource_of(app: Application, *, image: str = IMAGE) -> spec.AppResource:
    return spec.parse(body_of(app, image=image), root=spec.APP_ROOT)


# -- the Job ----------------------------------------------------------------------------------


def test_the_job_runs_the_verifier_from_the_applications_image_as_its_replicas_run(
    app: Application,
) -> None:
    resource = resource_of(app)
    job = verify_job.job(resource)
    pod = job["spec"]["template"]["spec"]
    replica = resources.deployment(resource, "scorer", Facts(config={}))["spec"]["template"]
    (container,) = pod["containers"]
    (streamlet,) = replica["spec"]["containers"]
    assert container["image"] == streamlet["image"] == IMAGE
    assert container["imagePullPolicy"] == streamlet["imagePullPolicy"]
    assert container["workingDir"] == streamlet["workingDir"] == "/app/tests/operator/k8s/app"
    assert container["securityContext"] == streamlet["securityContext"]
    assert pod["securityContext"] == replica["spec"]["securityContext"]
    assert container["command"] == ["python3", "-P", "-m", CHILD_MODULE]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert {k: env[k] for k in ("HOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")} == {
        e["name"]: e["value"] for e in streamlet["env"] if "value" in e
    }
    # the application, its paths where the image holds them; no Kafka secret in sight
    application = decode_request(env[REQUEST_ENV])["application"]
    assert application == verify_job.request(resource)
    assert application["python_paths"] == ["/app/tests/operator/k8s/app", "/app/blueprints/wine"]
    assert "envFrom" not in container and "secretRef" not in json.dumps(job)
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False


def test_the_job_is_owned_labelled_bounded_and_named_by_what_it_verifies(app: Application) -> None:
    resource = resource_of(app)
    job = verify_job.job(resource, deadline_s=120, ttl_s=900)
    metadata, key = job["metadata"], verify_job.spec_key(resource)
    assert metadata["namespace"] == "prod"
    assert metadata["ownerReferences"] == [resource.owner_reference()]
    assert metadata["ownerReferences"][0]["uid"] == "u-1"
    assert metadata["name"] == verify_job.job_name(resource, key)
    assert metadata["name"].startswith(f"{resource.name}-verify-{key[:10]}")
    assert metadata["labels"][verify_job.SPEC_HASH_LABEL] == key
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == names.MANAGED_BY
    assert metadata["labels"]["app.kubernetes.io/component"] == verify_job.COMPONENT
    assert job["spec"]["template"]["metadata"]["labels"] == metadata["labels"]
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 120
    assert job["spec"]["ttlSecondsAfterFinished"] == 900
    # the same spec, the same Job; another config or image, another Job
    assert verify_job.job(resource_of(app))["metadata"]["name"] == metadata["name"]
    reconfigured = resource_of(app.with_config("scorer", {"threshold": 7.5}))
    rebuilt = resource_of(app, image="reg.example/wine:2")
    others = {verify_job.job(r)["metadata"]["name"] for r in (reconfigured, rebuilt)}
    assert len(others) == 2 and metadata["name"] not in others


def test_a_large_request_is_packed_to_fit_one_environment_variable() -> None:
    small = {"name": "a"}
    assert json.loads(encode_request(small)) == {"application": small}
    large = {"name": "a", "blob": "x" * 200_000}
    packed = encode_request(large)
    assert len(packed) < 96 * 1024 and decode_request(packed) == {"application": large}


# -- the verifier's states, on an in-memory cluster --------------------------------------------


def matches(labels: Mapping[str, str], selector: str) -> bool:
    return all(labels.get(k) == v for k, _, v in (p.partition("=") for p in selector.split(",")))


class FakeJobs:
    """The Job calls, on dicts; a test finishes a Job with :meth:`finish` or :meth:`stuck`."""

    def __init__(self) -> None:
        self.job_bodies: dict[str, dict[str, Any]] = {}
        self.pod_bodies: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, str] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(j)
            for j in self.job_bodies.values()
            if matches(j["metadata"]["labels"], selector)
        ]

    def create_job(self, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name in self.job_bodies:
            raise ApiException(status=409, reason="AlreadyExists")
        job = copy.deepcopy(dict(body))
        job["metadata"]["uid"] = f"job-{len(self.created)}"
        self.job_bodies[name] = job
        self.created.append(name)

    def delete_job(self, namespace: str, name: str) -> None:
        self.job_bodies.pop(name, None)
        self.deleted.append(name)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(p)
            for p in self.pod_bodies.values()
            if matches(p["metadata"]["labels"], selector)
        ]

    def pod_log(self, namespace: str, name: str, *, container: str) -> str:
        assert container == verify_job.CONTAINER
        if name not in self.logs:
            raise ApiException(status=400, reason="the node has no logs")
        return self.logs[name]

    # -- what the Job controller and the kubelet would do ---------------------------------

    def _pod(self, name: str, state: dict[str, Any]) -> str:
        job = self.job_bodies[name]
        pod_name = f"{name}-{job['metadata']['uid']}"
        self.pod_bodies[pod_name] = {
            "metadata": {
                "name": pod_name,
                "labels": job["spec"]["template"]["metadata"]["labels"],
                "ownerReferences": [{"kind": "Job", "uid": job["metadata"]["uid"]}],
                "creationTimestamp": "2025-01-01T00:00:00Z",
            },
            "status": {"containerStatuses": [{"name": verify_job.CONTAINER, "state": state}]},
        }
        return pod_name

    def stuck(self, name: str, reason: str, message: str = "") -> None:
        self._pod(name, {"waiting": {"reason": reason, "message": message}})

    def finish(self, name: str, *, log: str, exit_code: int = 0, failed: str = "") -> None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else ""}}
        self.logs[self._pod(name, state)] = log
        kind, reason = ("Failed", failed) if failed else ("Complete", "")
        condition = {"type": kind, "status": "True", "reason": reason}
        self.job_bodies[name]["status"] = {"conditions": [condition]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_like_the_job(resource: spec.AppResource) -> str:
    """The Job's container, run here over this checkout: its log (stdout and stderr as one)."""
    (container,) = verify_job.job(resource)["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    env[REQUEST_ENV] = encode_request(verify_job.request(resource, root=str(ROOT)))
    python, *args = container["command"]
    assert python == "python3"
    done = subprocess.run(
        [sys.executable, *args],
        env={**os.environ, **env},
        cwd=resource.layout.working_dir(str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    return "a module printed this while it was imported\n" + done.stdout


@pytest.fixture(scope="module")
def answer(app: Application) -> str:
    return run_like_the_job(resource_of(app))


def test_pending_while_the_job_runs_then_the_answer_in_its_log(
    app: Application, answer: str
) -> None:
    jobs, resource = FakeJobs(), resource_of(app)
    verifier = job_verifier.JobVerifier(jobs)
    first = verifier.check(resource)
    assert (
        first.pending
        and not first.ok
        and jobs.created == [verify_job.job(resource)["metadata"]["name"]]
    )
    (name,) = jobs.created
    assert f"job/{name}" in first.pending and IMAGE in first.pending
    jobs.stuck(name, "ContainerCreating")
    waiting = verifier.check(resource)
    assert waiting.pending and "ContainerCreating" in waiting.pending
    assert jobs.created == [name]  # a resync finds the Job it started
    jobs.finish(name, log=answer)
    verdict = verifier.check(resource)
    assert verdict.ok and verdict.facts["scorer"].config == {"threshold": 6.0}
    assert verdict.facts["ingress"].http_port == 8000
    assert name in jobs.deleted and name not in jobs.job_bodies
    assert verifier.check(resource) is verdict and jobs.created == [name]  # cached by its hash


def test_a_spec_that_does_not_verify_comes_back_with_its_located_problems(app: Application) -> None:
    data = app.to_dict()
    data["streamlets"]["logger"]["class"] = "wine_app:NoSuchLogger"
    resource = resource_of(Application.from_dict(data))
    jobs = FakeJobs()
    verifier = job_verifier.JobVerifier(jobs)
    assert verifier.check(resource).pending
    jobs.finish(jobs.created[0], log=run_like_the_job(resource))  # it exits 0: it ran fine
    verdict = verifier.check(resource)
    assert not verdict.ok and verdict.error is None and verdict.pending is None
    assert ("class-not-found", "spec.streamlets.logger.class") in [
        (p["code"], p["where"]) for p in verdict.errors
    ]
    refusal = unapplied.unverified(verdict)
    assert refusal.event == "VerificationFailed" and "spec.streamlets.logger.class" in (
        refusal.message
    )


def test_a_pod_that_cannot_pull_its_image_fails_at_once_and_is_retried_after_a_back_off(
    app: Application,
) -> None:
    jobs, clock, resource = FakeJobs(), Clock(), resource_of(app)
    verifier = job_verifier.JobVerifier(jobs, clock=clock, retry_s=30, retry_max_s=100)
    verifier.check(resource)
    (name,) = jobs.created
    jobs.stuck(name, "ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
    verdict = verifier.check(resource)
    assert verdict.error and "ImagePullBackOff" in verdict.error and IMAGE in verdict.error
    assert name in jobs.deleted
    refusal = unapplied.unverified(verdict)
    assert refusal.event == "VerifierFailed"
    assert refusal.also[0].status is None and refusal.also[0].reason == "VerifierFailed"
    clock.now += 29
    assert verifier.check(resource) is verdict and jobs.created == [name]  # backing off
    clock.now += 2
    assert verifier.check(resource).pending and jobs.created == [name, name]  # tried again
    jobs.stuck(name, "ErrImagePull")
    verifier.check(resource)
    clock.now += 59  # the back-off doubled
    assert verifier.check(resource).error and len(jobs.created) == 2
    clock.now += 2
    assert verifier.check(resource).pending and len(jobs.created) == 3


def test_a_job_that_failed_says_how_with_its_exit_code_and_the_tail_of_its_log(
    app: Application,
) -> None:
    jobs, resource = FakeJobs(), resource_of(app)
    verifier = job_verifier.JobVerifier(jobs)
    verifier.check(resource)
    (name,) = jobs.created
    log = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'tensorflow'\n"
    jobs.finish(name, log=log, exit_code=1, failed="BackoffLimitExceeded")
    verdict = verifier.check(resource)
    assert verdict.error is not None and not verdict.ok
    for part in ("BackoffLimitExceeded", "exited with 1", "No module named 'tensorflow'"):
        assert part in verdict.error, verdict.error
    assert name not in jobs.job_bodies


def test_a_complete_job_without_an_answer_is_a_failure_not_a_verdict(app: Application) -> None:
    jobs, resource = FakeJobs(), resource_of(app)
    verifier = job_verifier.JobVerifier(jobs)
    verifier.check(resource)
    jobs.finish(jobs.created[0], log="something else entirely\n")
    verdict = verifier.check(resource)
    assert verdict.error and "no answer" in verdict.error and "something else" in verdict.error


def test_the_applications_own_json_logs_are_never_taken_for_the_answer(answer: str) -> None:
    app_log = '{"problems": [], "streamlets": {}, "level": "info"}'
    assert verify.read_answer(answer + app_log + "\n").facts  # the child's line, not the app's
    with pytest.raises(verify.AnswerError, match="no answer"):
        verify.read_answer(app_log + "\n")


def test_a_changed_spec_gets_a_new_job_and_the_superseded_one_goes(app: Application) -> None:
    jobs = FakeJobs()
    verifier = job_verifier.JobVerifier(jobs)
    before = resource_of(app)
    after = resource_of(app.with_config("scorer", {"threshold": 7.5}))
    verifier.check(before)
    verifier.check(before)
    assert len(jobs.created) == 1  # no second Job for the same spec
    assert verifier.check(after).pending
    old, new = jobs.created
    assert old != new and old in jobs.deleted and list(jobs.job_bodies) == [new]


def test_a_scale_starts_no_job_for_the_replica_count_is_not_verified_again(
    app: Application,
) -> None:
    jobs = FakeJobs()
    verifier = job_verifier.JobVerifier(jobs)
    verifier.check(resource_of(app))
    scaled = resource_of(app.with_replicas("scorer", 5))
    assert verify_job.spec_key(scaled) == verify_job.spec_key(resource_of(app))
    verifier.check(scaled)
    assert len(jobs.created) == 1


def test_a_job_the_api_server_refuses_fails_the_verification_with_its_reason(
    app: Application,
) -> None:
    class Forbidden(FakeJobs):
        def create_job(self, body: Mapping[str, Any]) -> None:
            raise ApiException(status=403, reason="Forbidden")

    verdict = job_verifier.JobVerifier(Forbidden()).check(resource_of(app))
    assert verdict.error and "cannot be created" in verdict.error and "Forbidden" in verdict.error


# -- a reconcile, while the Job runs and once it answered --------------------------------------


class JobsCluster(FakeCluster, FakeJobs):
    def __init__(self, body: dict[str, Any]) -> None:
        FakeCluster.__init__(self, body, keda=False)
        FakeJobs.__init__(self)


def test_the_application_is_pending_while_verified_and_applied_once_it_is(
    app: Application, answer: str
) -> None:
    cluster = JobsCluster(body_of(dataclasses.replace(app)))
    events = Events()
    reconciler = Reconciler(
        cluster,  # type: ignore[arg-type]
        events,
        verifier=job_verifier.JobVerifier(cluster),
        keda_installed=lambda: False,
        allowed_images=(IMAGE,),
    )
    name = cluster.body["metadata"]["name"]
    for _ in range(2):
        outcome = reconciler.reconcile("prod", name)
        assert outcome is not None and outcome.actions == []
    status = cluster.body["status"]
    assert status["phase"] == "Pending" and status["message"].startswith("verifying the spec")
    verified = next(c for c in status["conditions"] if c["type"] == "Verified")
    assert (verified["status"], verified["reason"]) == ("Unknown", "Verifying")
    assert [r for r, _ in events.posted] == ["Verifying"]  # once, not on every resync
    assert not cluster.objects  # nothing is created before the spec verified
    cluster.finish(cluster.created[0], log=answer)
    outcome = reconciler.reconcile("prod", name)
    assert outcome is not None and {a.streamlet for a in outcome.actions} == set(app.streamlets)
    verified = next(c for c in cluster.body["status"]["conditions"] if c["type"] == "Verified")
    assert verified["status"] == "True"


def test_a_restarted_operator_trusts_the_recorded_verdict_and_starts_no_job(
    app: Application, answer: str
) -> None:
    cluster = JobsCluster(body_of(dataclasses.replace(app)))
    name = cluster.body["metadata"]["name"]

    def operator() -> Reconciler:  # a fresh one: the verifier's cache is empty
        verifier = job_verifier.JobVerifier(cluster, clock=Clock())
        return Reconciler(
            cluster, Events(), verifier=verifier, keda_installed=lambda: False,  # type: ignore[arg-type]
            allowed_images=(IMAGE,),
        )  # fmt: skip

    first = operator()
    first.reconcile("prod", name)
    cluster.finish(cluster.created[0], log=answer)
    first.reconcile("prod", name)
    recorded = cluster.body["status"]["verified"]
    assert recorded["key"] == verify_job.spec_key(resource_of(app))
    before = copy.deepcopy(cluster.body["status"])
    restarted = operator()
    outcome = restarted.reconcile("prod", name)
    assert outcome is not None and outcome.actions == [] and len(cluster.created) == 1
    assert cluster.body["status"] == before  # verified from the record: no Verifying
    # A record from an older operator (none): verified again, and the status stays meanwhile.
    del cluster.body["status"]["verified"]
    again = operator().reconcile("prod", name)
    assert again is not None and len(cluster.created) == 2
    assert not unapplied.is_verifying(cluster.body["status"])


# -- on the control plane (kwok's nodes run no container) ----------------------------------------


def _verified(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    status = get_json(kubectl, "sfapp", name, "-n", namespace).get("status") or {}
    found = next((c for c in status.get("conditions") or [] if c["type"] == "Verified"), None)
    return {"phase": status.get("phase"), **(found or {})}


def test_with_verify_in_job_an_application_gets_its_job_and_reports_verifying(
    start_operator: Callable[..., OperatorThread], kubectl: Kubectl, namespace: str
) -> None:
    # No pod may start here: the Job then runs for as long as a test looks at it.
    kubectl("create", "quota", "no-pods", "--hard=pods=0", "-n", namespace)
    start_operator(verify_in="job")
    app = make_application(bootstrap="kafka.invalid:9092")  # nothing reaches Kafka before a verdict
    body = spec.body(app, namespace=namespace, pods=spec.PodSettings(image=TEST_IMAGE))
    kubectl("apply", "-f", "-", input=json.dumps(body))
    name = body["metadata"]["name"]

    state = wait_until(
        lambda: (s := _verified(kubectl, namespace, name)).get("reason") == "Verifying" and s,
        what=f"{name} to report Verifying",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert state["phase"] == "Pending" and state["status"] == "Unknown"
    live = get_json(kubectl, "sfapp", name, "-n", namespace)
    resource = spec.parse(live, root=spec.APP_ROOT)
    selector = verify_job.selector(resource)
    (job,) = get_json(kubectl, "jobs", "-n", namespace, "-l", selector)["items"]
    assert job["metadata"]["name"] == verify_job.job_name(resource, verify_job.spec_key(resource))
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "StreamflowApplication",
        name,
        live["metadata"]["uid"],
    )
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == TEST_IMAGE
    assert container["workingDir"] == "/app/tests/operator/k8s/app"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert decode_request(env[REQUEST_ENV]) == {"application": verify_job.request(resource)}
    assert f"job/{job['metadata']['name']}" in state["message"]
    listing = get_json(kubectl, "deployments", "-n", namespace, "-l", "streamflow.io/app")
    assert listing["items"] == []  # nothing is applied before the spec verified


def test_a_job_that_leaves_no_answer_fails_the_application_with_why_and_goes(
    start_operator: Callable[..., OperatorThread], kubectl: Kubectl, namespace: str
) -> None:
    """kwok completes the Job's pod at once, and its pod has no log: the answer is missing."""
    operator = start_operator(verify_in="job")
    verifier = operator.operator.reconciler.verifier
    assert isinstance(verifier, job_verifier.JobVerifier)
    verifier.retry_s = 3600.0  # no retry while the test looks: the Job's absence is the deletion
    app = make_application(bootstrap="kafka.invalid:9092")
    body = spec.body(app, namespace=namespace, pods=spec.PodSettings(image=TEST_IMAGE))
    kubectl("apply", "-f", "-", input=json.dumps(body))
    name = body["metadata"]["name"]

    state = wait_until(
        lambda: (s := _verified(kubectl, namespace, name)).get("phase") == "Failed" and s,
        what=f"{name} to fail its verification",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert (state["status"], state["reason"]) == ("Unknown", "VerifierFailed")
    assert "its log cannot be read" in state["message"] and TEST_IMAGE in state["message"]
    selector = "involvedObject.kind=StreamflowApplication,type=Warning"
    wait_until(
        lambda: any(
            e["reason"] == "VerifierFailed" and e["involvedObject"]["name"] == name
            for e in get_json(kubectl, "events", "-n", namespace, f"--field-selector={selector}")[
                "items"
            ]
        ),
        what="the VerifierFailed Warning event",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    wait_until(
        lambda: not get_json(kubectl, "jobs", "-n", namespace)["items"],
        what="the failed Job to be deleted",
        timeout=WAIT_S,
        interval=POLL_S,
    )
