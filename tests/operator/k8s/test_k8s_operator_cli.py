"""``streamflow operator run`` as a pod runs it: a process, with only its Role's rights.

The operator runs as the ServiceAccount of ``operator/rbac.yaml`` (a token from
the TokenRequest API in a kubeconfig of its own), so a verb missing from the
Role fails this test: the RBAC is least privilege and still sufficient.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import manifests
from streamflow.operator.kubernetes.target import KubernetesTarget
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import POLL_S, WAIT_S
from tests.waiting import wait_until

STREAMFLOW = Path(sys.executable).with_name("streamflow")


@pytest.fixture
def operator_kubeconfig(
    kube_cluster: devkit.KubeCluster, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> Path:
    """A kubeconfig that authenticates as the operator's ServiceAccount in ``namespace``."""
    kubectl("apply", "-f", "-", input=manifests.render(manifests.rbac(namespace=namespace)))
    token = kubectl("create", "token", manifests.ACCOUNT, "-n", namespace).strip()
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    config["users"] = [{"name": "operator", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "operator"
    path = tmp_path / "operator-kubeconfig.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_operators_deployment_manifest_is_valid(kubectl: Kubectl, namespace: str) -> None:
    body = manifests.render([manifests.operator_deployment(namespace=namespace)])
    kubectl("apply", "--dry-run=server", "-f", "-", input=body)


def test_operator_run_reconciles_with_its_role_and_stops_cleanly_on_sigterm(
    operator_kubeconfig: Path,
    namespace: str,
    target: KubernetesTarget,
    application: Application,
) -> None:
    command = [
        str(STREAMFLOW), "operator", "run", f"--kubeconfig={operator_kubeconfig}",
        f"--namespace={namespace}", "--log-format=plain",
        "--verify-in=operator",  # kwok's nodes run no verifier Job
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        target.deploy(application, bootstrap=None)
        wait_until(
            lambda: target.status(application.name).settled,
            what="the app to settle",
            timeout=WAIT_S,
            interval=POLL_S,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert f"watching {namespace}" in output
    assert f"{namespace}/{application.name}: create scorer with 2 replica(s)" in output
    assert "Traceback" not in output
    assert "Forbidden" not in output and "403" not in output  # the Role is enough
