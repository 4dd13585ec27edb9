"""``streamflow undeploy --target kubernetes`` returns once the application is gone.

It waits for the resource and the children the garbage collector deletes
after it; when something holds them (a finalizer whose controller is not
there), it names it and exits 1 instead of reporting success.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes.target import KubernetesTarget
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import POLL_S, WAIT_S, OperatorThread, get_json
from tests.waiting import wait_until

STREAMFLOW = Path(sys.executable).with_name("streamflow")
HOLD = "example.com/hold"
IMAGE = "reg.example/wine:1"
StartOperator = Callable[..., OperatorThread]


def undeploy(
    cluster: devkit.KubeCluster, namespace: str, name: str, *options: str
) -> subprocess.CompletedProcess[str]:
    command = [
        str(STREAMFLOW), "undeploy", name, "--target=kubernetes",
        f"--kubeconfig={cluster.kubeconfig}", f"--namespace={namespace}", *options,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def left(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    selector = f"streamflow.io/app={name}"
    found = get_json(kubectl, "sfapp,deployments,configmaps,pods", "-n", namespace, "-l", selector)
    resource = kubectl(
        "get", "sfapp", "-n", namespace, "-o=name", f"--field-selector=metadata.name={name}"
    )
    return [item["metadata"]["name"] for item in found["items"]] + resource.split()


def test_undeploy_returns_once_the_resource_and_its_children_are_gone(
    start_operator: StartOperator,
    kube_cluster: devkit.KubeCluster,
    kubectl: Kubectl,
    namespace: str,
    application: Application,
) -> None:
    start_operator()
    target = KubernetesTarget(
        kubeconfig=str(kube_cluster.kubeconfig), namespace=namespace, image=IMAGE
    )
    target.deploy(application, bootstrap=None)
    name = application.name

    def running() -> bool:
        return target.status(name).phase == "Running"

    wait_until(running, what=f"{name} to be Running", timeout=WAIT_S, interval=POLL_S)
    done = undeploy(kube_cluster, namespace, name)
    assert done.returncode == 0, done.stderr
    assert f"undeployed {name}" in done.stderr
    assert left(kubectl, namespace, name) == []


def test_undeploy_names_what_holds_the_application_and_fails(
    kube_cluster: devkit.KubeCluster,
    kubectl: Kubectl,
    namespace: str,
    application: Application,
) -> None:
    target = KubernetesTarget(
        kubeconfig=str(kube_cluster.kubeconfig), namespace=namespace, image=IMAGE
    )
    target.deploy(application, bootstrap=None)
    name = application.name
    hold = {"metadata": {"finalizers": [HOLD]}}
    kubectl("patch", "sfapp", name, "-n", namespace, "--type=merge", f"-p={json.dumps(hold)}")
    try:
        done = undeploy(kube_cluster, namespace, name, "--timeout=2s")
        assert done.returncode == 1, done.stderr
        assert "not gone after 2s" in done.stderr and HOLD in done.stderr, done.stderr
        assert "Traceback" not in done.stderr

        asked = undeploy(kube_cluster, namespace, name, "--no-wait")
        assert asked.returncode == 0, asked.stderr
    finally:
        release = {"metadata": {"finalizers": None}}
        kubectl(
            "patch", "sfapp", name, "-n", namespace, "--type=merge", f"-p={json.dumps(release)}"
        )
