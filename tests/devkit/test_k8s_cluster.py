"""The kwok cluster's control plane is real: controllers, scheduler and CRDs all act.

kwok fakes only the kubelet, so each test checks something a fake API server
would not do on its own: a ReplicaSet replacing a deleted pod, the scheduler
binding pods to nodes, EndpointSlices following a Service, a CRD being served.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamflow.devkit import KUBE_BINARIES, DevkitError, KubeCluster, find_k8s_bin
from tests.k8s_fixtures import Kubectl
from tests.waiting import wait_until

_WAIT_S = 60.0
_POLL_S = 0.25  # each poll runs kubectl


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:10]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def deployment(name: str, *, replicas: int) -> str:
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    # kwok never pulls the image: any reference will do.
                    "spec": {"containers": [{"name": "main", "image": "example.invalid/app:1"}]},
                },
            },
        }
    )


def running_ready_pods(kubectl: Kubectl, namespace: str, app: str) -> dict[str, dict[str, Any]]:
    listing = json.loads(kubectl("get", "pods", "-n", namespace, "-l", f"app={app}", "-o=json"))
    return {
        pod["metadata"]["name"]: pod
        for pod in listing["items"]
        if "deletionTimestamp" not in pod["metadata"]
        and pod["status"].get("phase") == "Running"
        and any(
            condition["type"] == "Ready" and condition["status"] == "True"
            for condition in pod["status"].get("conditions", [])
        )
    }


@pytest.fixture
def web(kubectl: Kubectl, namespace: str) -> str:
    """A 2-replica Deployment `web` in `namespace`, rolled out."""
    kubectl("apply", "-n", namespace, "-f", "-", input=deployment("web", replicas=2))
    kubectl("rollout", "status", "-n", namespace, "deployment/web", f"--timeout={_WAIT_S:.0f}s")
    return "web"


def test_deployment_pods_are_scheduled_and_become_running_and_ready(
    kubectl: Kubectl, namespace: str, web: str
) -> None:
    pods = running_ready_pods(kubectl, namespace, web)
    assert len(pods) == 2
    nodes = set(kubectl("get", "nodes", "-o=jsonpath={.items[*].metadata.name}").split())
    assert {pod["spec"]["nodeName"] for pod in pods.values()} <= nodes
    assert all(pod["status"].get("podIP") for pod in pods.values())


def test_a_deleted_pod_is_replaced_by_the_replicaset(
    kubectl: Kubectl, namespace: str, web: str
) -> None:
    victim = sorted(running_ready_pods(kubectl, namespace, web))[0]
    kubectl("delete", "pod", "-n", namespace, victim, "--wait=false")

    def replaced() -> bool:
        pods = running_ready_pods(kubectl, namespace, web)
        return len(pods) == 2 and victim not in pods

    wait_until(
        replaced,
        what=f"a Running, Ready replacement for pod {victim}",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )


def test_a_service_gets_a_cluster_ip_and_endpoints_for_ready_pods(
    kubectl: Kubectl, namespace: str, web: str
) -> None:
    kubectl("expose", "deployment", web, "-n", namespace, "--port=80", "--target-port=8080")
    cluster_ip = kubectl("get", "service", web, "-n", namespace, "-o=jsonpath={.spec.clusterIP}")
    assert cluster_ip and cluster_ip != "None"

    def ready_endpoints() -> int:
        slices = json.loads(
            kubectl(
                "get", "endpointslices", "-n", namespace,
                "-l", f"kubernetes.io/service-name={web}", "-o=json",
            )
        )  # fmt: skip
        return sum(
            1
            for item in slices["items"]
            for endpoint in item.get("endpoints") or []
            if endpoint.get("conditions", {}).get("ready")
        )

    wait_until(
        lambda: ready_endpoints() == 2,
        what="2 ready endpoints in the EndpointSlices",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )


_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.streamflow.dev"},
    "spec": {
        "group": "test.streamflow.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, size: int) -> str:
    return json.dumps(
        {
            "apiVersion": "test.streamflow.dev/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"size": size},
        }
    )


def test_a_crd_is_served_and_validates_its_custom_resources(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(_CRD))
    kubectl(
        "wait", "--for=condition=Established", f"--timeout={_WAIT_S:.0f}s",
        "crd/widgets.test.streamflow.dev",
    )  # fmt: skip

    kubectl("apply", "-n", namespace, "-f", "-", input=widget("small", 3))
    stored = json.loads(kubectl("get", "widget", "small", "-n", namespace, "-o=json"))
    assert stored["spec"] == {"size": 3}
    assert stored["metadata"]["uid"]

    with pytest.raises(DevkitError, match=r"spec\.size"):
        kubectl("apply", "-n", namespace, "-f", "-", input=widget("empty", 0))


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent's reaping remains


def test_stop_ends_every_component_and_removes_the_work_dir() -> None:
    with KubeCluster(nodes=1) as cluster:
        work_dir = cluster.work_dir
        assert work_dir is not None
        pid_files = list(work_dir.glob("kwok/clusters/*/pids/*.pid"))
        pids = [int(path.read_text()) for path in pid_files]
        names = {path.stem for path in pid_files}
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} <= names
    assert not work_dir.exists()
    assert not [pid for pid in pids if running(pid)], "components outlived stop()"
    cluster.stop()  # idempotent


def test_a_component_that_dies_fails_the_start_fast_and_quotes_its_log(tmp_path: Path) -> None:
    real = find_k8s_bin()
    for name in KUBE_BINARIES:
        (tmp_path / name).symlink_to(real / name)
    broken = tmp_path / "kube-apiserver"
    broken.unlink()
    # kwokctl asks for --version first, then starts it.
    broken.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && echo "Kubernetes v1.36.3" && exit 0\n'
        'echo "apiserver refuses on purpose" >&2\nexit 3\n'
    )
    broken.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(DevkitError, match="kube-apiserver exited") as caught:
        KubeCluster(bin_dir=tmp_path).start(timeout=60)
    assert time.monotonic() - started < 30
    assert "apiserver refuses on purpose" in str(caught.value)


def test_missing_binaries_say_how_to_build_them(tmp_path: Path) -> None:
    with pytest.raises(DevkitError, match=r"tools/k8s/build") as caught:
        KubeCluster(bin_dir=tmp_path).start()
    assert "kube-apiserver" in str(caught.value)
