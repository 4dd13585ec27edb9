"""Kubernetes fixtures: one kwok cluster per test session, and kubectl against it.

Load with `pytest_plugins = ["tests.k8s_fixtures"]` in the root conftest (or
`from tests.k8s_fixtures import *`). The cluster starts on first use only, so a
session that asks for no Kubernetes pays nothing. When the binaries are missing
the test fails (never skips) with the command that builds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import pytest

from streamflow import devkit

__all__ = ["Kubectl", "kube_cluster", "kubectl"]


class Kubectl(Protocol):
    def __call__(self, *args: str, input: str | None = None, timeout: float = 60.0) -> str: ...


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[devkit.KubeCluster]:
    """The session's running cluster; `.kubeconfig` is its admin kubeconfig."""
    cluster = devkit.KubeCluster()
    try:
        cluster.start()
    except devkit.DevkitError as error:
        failure = str(error)
    else:
        failure = None
    if failure is not None:  # outside `except`, so pytest shows the message once
        pytest.fail(failure, pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture
def kubectl(kube_cluster: devkit.KubeCluster) -> Kubectl:
    """`kubectl("get", "pods", "-o=json")` runs kubectl on the session's cluster.

    Returns stdout; a non-zero exit fails with kubectl's message.
    """

    def run(*args: str, input: str | None = None, timeout: float = 60.0) -> str:
        return kube_cluster.kubectl(*args, input=input, timeout=timeout).stdout

    return run
