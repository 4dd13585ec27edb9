"""The operator on a real control plane: deploy, scale, configure, restart, repair, undeploy.

Each test has a namespace of its own and an operator watching only it,
running in this process (see ``support.OperatorThread``); the CLI runs as the
user runs it, a process of its own, with ``--target kubernetes``. kwok makes
the pods Running and Ready without running anything in them, so these tests
check what the operator writes and how it follows the pods, not the streamlets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator import planner
from streamflow.operator.kubernetes.target import KubernetesTarget
from streamflow.operator.targets import TargetError
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import POLL_S, WAIT_S, OperatorThread, get_json
from tests.waiting import wait_until

STREAMFLOW = Path(sys.executable).with_name("streamflow")
CHECKSUM = "streamflow.io/config-checksum"
STREAMLETS = ("ingress", "logger", "scorer")

StartOperator = Callable[[], OperatorThread]


def cli(
    cluster: devkit.KubeCluster, namespace: str, *args: str
) -> subprocess.CompletedProcess[str]:
    command = [str(STREAMFLOW), *args, "--target=kubernetes", f"--kubeconfig={cluster.kubeconfig}"]
    return subprocess.run(
        [*command, f"--namespace={namespace}"], capture_output=True, text=True, timeout=120
    )


def app_resource(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(kubectl, "sfapp", name, "-n", namespace)
    return found


def wait_running(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    """The resource once its status is Running, 3/3, for its latest spec."""

    def running() -> dict[str, Any] | None:
        found = app_resource(kubectl, namespace, name)
        status = found.get("status") or {}
        current = status.get("observedGeneration") == found["metadata"]["generation"]
        done = current and status.get("phase") == "Running" and status.get("ready") == "3/3"
        return found if done else None

    found: dict[str, Any] = wait_until(
        running, what=f"{name} to be Running with 3/3 ready", timeout=WAIT_S, interval=POLL_S
    )
    return found


def children(kubectl: Kubectl, namespace: str, kind: str, name: str) -> dict[str, Any]:
    """The app's objects of a kind, by streamlet."""
    listing = get_json(kubectl, kind, "-n", namespace, "-l", f"streamflow.io/app={name}")
    return {
        item["metadata"]["labels"]["streamflow.io/streamlet"]: item for item in listing["items"]
    }


def ready_pods(kubectl: Kubectl, namespace: str, name: str, streamlet: str) -> list[str]:
    selector = f"streamflow.io/app={name},streamflow.io/streamlet={streamlet}"
    listing = get_json(kubectl, "pods", "-n", namespace, "-l", selector)
    return sorted(
        pod["metadata"]["name"]
        for pod in listing["items"]
        if "deletionTimestamp" not in pod["metadata"]
        and pod["status"].get("phase") == "Running"
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod["status"].get("conditions", [])
        )
    )


def checksums(kubectl: Kubectl, namespace: str, name: str) -> dict[str, str]:
    return {
        streamlet: d["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
        for streamlet, d in children(kubectl, namespace, "deployments", name).items()
    }


def event_reasons(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    selector = f"involvedObject.kind=StreamflowApplication,involvedObject.name={name}"
    listing = get_json(kubectl, "events", "-n", namespace, f"--field-selector={selector}")
    return sorted(e["reason"] for e in listing["items"] for _ in range(e.get("count") or 1))


def deployed(
    start_operator: StartOperator, target: KubernetesTarget, kubectl: Kubectl, app: Application
) -> tuple[OperatorThread, dict[str, Any]]:
    operator = start_operator()
    target.deploy(app, bootstrap=None)
    return operator, wait_running(kubectl, target.namespace, app.name)


def test_deploy_creates_each_streamlets_children_and_the_status_follows_the_pods(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    application: Application,
    kafka_bootstrap: str,
) -> None:
    operator = start_operator()
    change = target.deploy(application, bootstrap=None)
    assert sorted(a.streamlet for a in change.actions if isinstance(a, planner.Create)) == sorted(
        STREAMLETS
    )
    namespace, name = target.namespace, application.name
    resource = wait_running(kubectl, namespace, name)
    owner = {
        "apiVersion": "streamflow.io/v1alpha1",
        "kind": "StreamflowApplication",
        "name": name,
        "uid": resource["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }

    deployments = children(kubectl, namespace, "deployments", name)
    assert sorted(deployments) == sorted(STREAMLETS)
    assert {s: d["spec"]["replicas"] for s, d in deployments.items()} == {
        "ingress": 1,
        "logger": 1,
        "scorer": 2,
    }
    for streamlet, deployment in deployments.items():
        assert deployment["metadata"]["name"] == f"{name}-{streamlet}"
        assert deployment["metadata"]["ownerReferences"] == [owner]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "streamflow-operator"
        assert labels["app.kubernetes.io/part-of"] == name
        assert labels["app.kubernetes.io/name"] == streamlet
        assert labels["app.kubernetes.io/instance"] == f"{name}-{streamlet}"
        assert labels["app.kubernetes.io/component"] == "streamlet"
        assert (labels["streamflow.io/app"], labels["streamflow.io/streamlet"]) == (name, streamlet)
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == (
            "8080",
            "/metrics",
        )
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["livenessProbe"]["httpGet"] == {
            "path": "/healthz",
            "port": "health",
            "scheme": "HTTP",
        }
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert f"--streamlet={streamlet}" in container["args"]
        assert "--app-spec=/etc/streamflow/app.json" in container["args"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]]
        assert volumes[mounts["/etc/streamflow"]]["configMap"]["name"] == f"{name}-{streamlet}"
        assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
        assert not any("secret" in json.dumps(e).lower() for e in container.get("env", []))

    config_maps = children(kubectl, namespace, "configmaps", name)
    assert sorted(config_maps) == sorted(STREAMLETS)
    assert all(c["metadata"]["ownerReferences"] == [owner] for c in config_maps.values())
    spec_in_pod = Application.from_dict(json.loads(config_maps["scorer"]["data"]["app.json"]))
    # Only what the scorer runs, with paths relative to its working directory (the
    # blueprint's, in the image): a change to another streamlet leaves it as it is.
    assert list(spec_in_pod.streamlets) == ["scorer"]
    assert spec_in_pod.streamlets["scorer"].config == application.streamlets["scorer"].config
    assert set(spec_in_pod.topics) == {
        t.name
        for t in application.topics.values()
        if "scorer" in {r.streamlet for r in (*t.producers, *t.consumers)}
    }
    assert spec_in_pod.source == "blueprint.yaml"
    assert spec_in_pod.kafka == application.kafka
    assert json.loads(config_maps["scorer"]["data"]["config.json"]) == {"threshold": 6.0}

    services = children(kubectl, namespace, "services", name)
    assert list(services) == ["ingress"]  # only the HTTP ingress serves
    (port,) = services["ingress"]["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (8000, "http")
    assert services["ingress"]["metadata"]["ownerReferences"] == [owner]

    status = resource["status"]
    assert status["streamlets"]["scorer"] == {
        "desired": 2,
        "ready": 2,
        "updated": 2,
        "available": 2,
    }
    assert len(ready_pods(kubectl, namespace, name, "scorer")) == 2
    table = kubectl("get", "sfapp", "-n", namespace).splitlines()
    assert table[0].split() == ["NAME", "PHASE", "READY", "AGE"]
    assert table[1].split()[:3] == [name, "Running", "3/3"]

    def topics_ready() -> bool:
        conditions = app_resource(kubectl, namespace, name)["status"]["conditions"]
        return any(c["type"] == "TopicsReady" and c["status"] == "True" for c in conditions)

    wait_until(topics_ready, what="the TopicsReady condition", timeout=WAIT_S, interval=POLL_S)
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert set(application.topics) | {f"{name}.scorer.dlq"} <= set(topics)

    found = target.status(name)
    assert (found.phase, found.settled) == ("Running", True)
    assert {s.name: (s.ready, s.desired) for s in found.streamlets}["scorer"] == (2, 2)
    assert event_reasons(kubectl, namespace, name).count("Deployed") == 3
    assert "create scorer with 2 replica(s)" in kubectl("describe", "sfapp", name, "-n", namespace)
    assert operator.history[-1].actions == []  # the last reconcile found nothing to do
    assert target.deploy(application, bootstrap=None).actions == ()  # deploying again: no-op


def test_logs_of_pods_on_simulated_nodes_are_a_clear_message(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    kube_cluster: devkit.KubeCluster,
    application: Application,
) -> None:
    _, _ = deployed(start_operator, target, kubectl, application)
    with pytest.raises(TargetError, match="no logs are available") as caught:
        next(iter(target.logs(application.name, "scorer", follow=False)))
    assert len(caught.value.problems) == 2  # one line per scorer pod
    assert "kwok" in caught.value.hint

    result = cli(kube_cluster, target.namespace, "logs", application.name, "scorer")
    assert result.returncode == 1
    assert "no logs are available" in result.stderr and "Traceback" not in result.stderr


def test_scale_patches_the_spec_and_the_operator_scales_only_that_deployment(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    kube_cluster: devkit.KubeCluster,
    application: Application,
) -> None:
    _, _ = deployed(start_operator, target, kubectl, application)
    namespace, name = target.namespace, application.name
    before = checksums(kubectl, namespace, name)

    result = cli(kube_cluster, namespace, "scale", name, "scorer", "3", "--timeout=60s")
    assert result.returncode == 0, result.stderr
    assert "scale scorer from 2 to 3" in result.stderr
    assert "sit idle" in result.stderr  # 3 replicas, 2 partitions

    resource = wait_running(kubectl, namespace, name)
    assert resource["spec"]["streamlets"]["scorer"]["replicas"] == 3
    assert children(kubectl, namespace, "deployments", name)["scorer"]["spec"]["replicas"] == 3
    assert len(ready_pods(kubectl, namespace, name, "scorer")) == 3
    assert resource["status"]["streamlets"]["scorer"]["ready"] == 3
    assert resource["status"]["streamlets"]["scorer"]["desired"] == 3
    assert checksums(kubectl, namespace, name) == before  # scaling rolls nothing
    assert "Scaled" in event_reasons(kubectl, namespace, name)


def test_configure_rolls_only_the_changed_streamlet(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    kube_cluster: devkit.KubeCluster,
    application: Application,
) -> None:
    _, _ = deployed(start_operator, target, kubectl, application)
    namespace, name = target.namespace, application.name
    before = checksums(kubectl, namespace, name)
    generations = {
        s: d["metadata"]["generation"]
        for s, d in children(kubectl, namespace, "deployments", name).items()
    }

    result = cli(kube_cluster, namespace, "configure", name, "--set=scorer.threshold=7.5")
    assert result.returncode == 0, result.stderr
    wait_running(kubectl, namespace, name)

    after = checksums(kubectl, namespace, name)
    assert after["scorer"] != before["scorer"]
    assert {s: after[s] for s in ("ingress", "logger")} == {
        s: before[s] for s in ("ingress", "logger")
    }
    deployments = children(kubectl, namespace, "deployments", name)
    assert deployments["ingress"]["metadata"]["generation"] == generations["ingress"]
    assert deployments["logger"]["metadata"]["generation"] == generations["logger"]
    config = children(kubectl, namespace, "configmaps", name)["scorer"]["data"]["config.json"]
    assert json.loads(config)["threshold"] == 7.5
    assert "Reconfigured" in event_reasons(kubectl, namespace, name)
    assert target.configuration(name)["scorer"]["threshold"] == 7.5

    # A wrong-typed value that got past the CLI (kubectl edit) fails the resource, and nothing
    # is applied: the pods keep their configuration.
    patch = {"spec": {"streamlets": {"scorer": {"config": {"threshold": "very high"}}}}}
    kubectl("patch", "sfapp", name, "-n", namespace, "--type=merge", f"--patch={json.dumps(patch)}")

    def failed() -> dict[str, Any] | None:
        status = app_resource(kubectl, namespace, name).get("status") or {}
        return status if status.get("phase") == "Failed" else None

    status = wait_until(failed, what="the Failed phase", timeout=WAIT_S, interval=POLL_S)
    assert "scorer" in status["message"] and "threshold" in status["message"]
    assert checksums(kubectl, namespace, name) == after


def test_an_operator_restart_resumes_without_repeating_an_action(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    application: Application,
) -> None:
    first, _ = deployed(start_operator, target, kubectl, application)
    namespace, name = target.namespace, application.name

    def versions() -> dict[str, tuple[str, int]]:
        return {
            f"{kind}/{streamlet}": (
                item["metadata"]["resourceVersion"],
                item["metadata"].get("generation", 0),
            )
            for kind in ("deployments", "configmaps", "services")
            for streamlet, item in children(kubectl, namespace, kind, name).items()
        }

    before = versions()
    events = event_reasons(kubectl, namespace, name)
    first.stop()

    second = start_operator()
    # The resume handler reconciles the app, and each Deployment's initial event does too.
    wait_until(
        lambda: len(second.history) >= 1 + len(STREAMLETS),
        what="the resumed reconciles",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert [o.actions for o in second.history] == [[] for _ in second.history]
    assert [o.repairs for o in second.history] == [[] for _ in second.history]
    assert versions() == before
    assert event_reasons(kubectl, namespace, name) == events
    assert wait_running(kubectl, namespace, name)["status"]["ready"] == "3/3"


def test_deleted_pods_and_deployments_come_back(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    application: Application,
) -> None:
    _, _ = deployed(start_operator, target, kubectl, application)
    namespace, name = target.namespace, application.name
    victim = ready_pods(kubectl, namespace, name, "scorer")[0]
    kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")

    def replaced() -> bool:
        pods = ready_pods(kubectl, namespace, name, "scorer")
        return len(pods) == 2 and victim not in pods

    wait_until(replaced, what=f"a replacement for pod {victim}", timeout=WAIT_S, interval=POLL_S)
    wait_running(kubectl, namespace, name)

    logger = children(kubectl, namespace, "deployments", name)["logger"]["metadata"]["uid"]
    kubectl("delete", "deployment", f"{name}-logger", "-n", namespace, "--wait=false")

    def recreated() -> bool:
        found = children(kubectl, namespace, "deployments", name).get("logger")
        return found is not None and found["metadata"]["uid"] != logger

    wait_until(
        recreated,
        what="the operator to recreate the logger's Deployment",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    wait_running(kubectl, namespace, name)


def test_undeploy_collects_every_child_and_keeps_the_topics(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    kube_cluster: devkit.KubeCluster,
    application: Application,
    kafka_bootstrap: str,
) -> None:
    _, _ = deployed(start_operator, target, kubectl, application)
    namespace, name = target.namespace, application.name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    wait_until(
        lambda: set(application.topics) <= set(admin.list_topics(timeout=10).topics),
        what="the topics",
        timeout=WAIT_S,
        interval=POLL_S,
    )

    result = cli(kube_cluster, namespace, "undeploy", name)
    assert result.returncode == 0, result.stderr
    assert "topics are kept" in result.stderr

    def collected() -> bool:  # the garbage collector follows the ownerReferences
        return not any(
            children(kubectl, namespace, kind, name)
            for kind in ("deployments", "replicasets", "pods", "configmaps", "services")
        )

    wait_until(
        collected,
        what="the garbage collector to delete the app's objects",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert kubectl("get", "sfapp", "-n", namespace, "-o=name") == ""
    assert set(application.topics) <= set(admin.list_topics(timeout=10).topics)
