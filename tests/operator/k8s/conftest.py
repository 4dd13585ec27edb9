"""Fixtures of the operator tests: the CRD installed once, a namespace and an operator per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes.target import KubernetesTarget
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import TEST_IMAGE, OperatorThread, make_application

CRD_FILE = Path(__file__).parents[3] / "operator" / "crd.yaml"


_CRD = "crd/streamflowapplications.streamflow.io"
_applied_to: set[str] = set()  # the kubeconfigs of the clusters that have it


@pytest.fixture
def crd(kube_cluster: devkit.KubeCluster) -> str:
    """The checked-in operator/crd.yaml, applied and Established: once per cluster, which
    is started again (empty) when a test needs it after its group was done."""
    if str(kube_cluster.kubeconfig) not in _applied_to:
        kube_cluster.kubectl("apply", f"--filename={CRD_FILE}")
        kube_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", _CRD)
        _applied_to.add(str(kube_cluster.kubeconfig))
    return _CRD


@pytest.fixture
def namespace(kubectl: Kubectl, crd: str) -> Iterator[str]:
    name = f"sf-{uuid.uuid4().hex[:10]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def start_operator(
    kube_cluster: devkit.KubeCluster, namespace: str
) -> Iterator[Callable[..., OperatorThread]]:
    """``start_operator(**options)`` runs an operator for the test's namespace; all stop after."""
    started: list[OperatorThread] = []

    def start(**options: Any) -> OperatorThread:
        operator = OperatorThread(
            kubeconfig=kube_cluster.kubeconfig, namespace=namespace, **options
        )
        started.append(operator)
        return operator.start()

    yield start
    for operator in started:
        operator.stop()


@pytest.fixture
def target(kube_cluster: devkit.KubeCluster, namespace: str) -> KubernetesTarget:
    return KubernetesTarget(
        kubeconfig=str(kube_cluster.kubeconfig), namespace=namespace, image=TEST_IMAGE
    )


@pytest.fixture
def application(kafka_bootstrap: str) -> Application:
    """The test application under a unique name, with its own topics on the session's Kafka."""
    return make_application(bootstrap=kafka_bootstrap)
