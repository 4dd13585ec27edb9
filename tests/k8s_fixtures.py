"""Kubernetes fixtures: one kwok cluster per test session (up while the group of the
tests that use it runs), kubectl against it, and a real node.

Load with `pytest_plugins = ["tests.k8s_fixtures"]` in the root conftest (or
`from tests.k8s_fixtures import *`). The cluster starts on first use only, so a
session that asks for no Kubernetes pays nothing. When the binaries are missing
the test fails (never skips) with the command that builds them.

`real_node` is a separate, small cluster whose one node really runs pods
(containerd, runc, a kubelet, kube-proxy): started on first use, once per
session, and only as root. It fails with `tools/k8s/node-setup` when the host
lacks what it needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import pytest

from streamflow import devkit
from tests import tiers

__all__ = ["Kubectl", "kube_cluster", "kubectl", "real_node"]


class Kubectl(Protocol):
    def __call__(self, *args: str, input: str | None = None, timeout: float = 60.0) -> str: ...


_clusters: list[devkit.KubeCluster] = []  # this session's, to stop with the kube group


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[devkit.KubeCluster]:
    """The session's running cluster; `.kubeconfig` is its admin kubeconfig.

    Its users are all in the group `kube` (tests/tiers.py), whose tests run one after
    another on one worker, so it is stopped when that group is done rather than at the
    session's end; a test that asks for it after that starts it again.
    """
    cluster = devkit.KubeCluster()
    _start(cluster)
    _clusters.append(cluster)
    yield cluster
    cluster.stop()


def _start(cluster: devkit.KubeCluster) -> None:
    failure: str | None = None
    try:
        cluster.start()
    except devkit.DevkitError as error:
        failure = str(error)
    if failure is not None:  # outside `except`, so pytest shows the message once
        pytest.fail(failure, pytrace=False)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "kube_cluster" in getattr(item, "fixturenames", ()):
        for cluster in _clusters:
            _start(cluster)  # a no-op while it runs


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    group_ends = nextitem is None or _group(nextitem) != tiers.KUBE_GROUP
    if _group(item) == tiers.KUBE_GROUP and group_ends:
        for cluster in _clusters:
            cluster.stop()


def _group(item: pytest.Item) -> str | None:
    return dict(item.user_properties).get("group")


@pytest.fixture(scope="session")
def real_node() -> Iterator[devkit.RealNode]:
    """The session's real node: `.kubectl(...)`, `.host_address`, `.import_image(archive)`.

    Pods use images imported into it (`devkit.TEST_IMAGE` is there already) and
    reach a service of this host at `.host_address`.
    """
    node = devkit.RealNode()
    failure: str | None = None
    try:
        node.start()
    except devkit.DevkitError as error:
        failure = str(error)
    if failure is not None:  # outside `except`, so pytest shows the message once
        pytest.fail(failure, pytrace=False)
    yield node
    node.stop()


@pytest.fixture
def kubectl(kube_cluster: devkit.KubeCluster) -> Kubectl:
    """`kubectl("get", "pods", "-o=json")` runs kubectl on the session's cluster.

    Returns stdout; a non-zero exit fails with kubectl's message.
    """

    def run(*args: str, input: str | None = None, timeout: float = 60.0) -> str:
        return kube_cluster.kubectl(*args, input=input, timeout=timeout).stdout

    return run
