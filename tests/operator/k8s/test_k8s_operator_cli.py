"""``streamflow operator run`` as a pod runs it: a process, with only its Role's rights.

The operator runs as the ServiceAccount of ``operator/rbac.yaml`` (a token from
the TokenRequest API in a kubeconfig of its own), so a verb missing from the
Role fails this test: the RBAC is least privilege and still sufficient.

An operator installed with the defaults (the command, arguments and environment
of the Deployment that ``streamflow operator manifests`` renders) admits only
the images of its own image's registry: a foreign image is refused with a
``Reconciled`` condition that names it and says why.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import manifests, spec, status
from streamflow.operator.kubernetes.target import KubernetesTarget
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import (
    POLL_S,
    TEST_IMAGE,
    TEST_REGISTRY,
    WAIT_S,
    get_json,
    make_application,
)
from tests.waiting import exited, wait_until

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
        f"--allowed-images={TEST_REGISTRY}",
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


# -- installed with the defaults: which images it admits ------------------------------------------

FOREIGN_IMAGE = "attacker.example/anything:latest"
# The README's install: `streamflow operator manifests --image $REGISTRY/streamflow:VERSION`.
OPERATOR_IMAGE = "registry.example/streamflow:0.1.0"


def _free_port() -> int:
    """A free port below the kernel's ephemeral range: one bound to port 0 and released
    can be taken meanwhile as the source port of any outgoing connection (a cold CI saw
    the operator's liveness port taken so), and none of those come from below."""
    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(100):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port below {low}")


class Installed:
    """``streamflow operator run`` with the command, arguments and environment of the
    Deployment the manifests render, as its pod runs them.

    What differs from the pod is only what a pod has of its own: its ServiceAccount's
    token comes in a kubeconfig (``--kubeconfig``), and the liveness endpoint and
    the web view listen on free ports (a pod has its own network). Nothing of the
    test runner's environment that streamflow reads (``STREAMFLOW_*``) is passed on.
    """

    def __init__(self, *, image: str | None, kubeconfig: Path, namespace: str, home: Path) -> None:
        deployment = manifests.operator_deployment(
            namespace=namespace, image=image or manifests.DEFAULT_IMAGE
        )
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        args = [self._own_port(arg) for arg in container["args"]]
        assert container["command"][0] == "streamflow"
        command = [str(STREAMFLOW), *container["command"][1:], *args, f"--kubeconfig={kubeconfig}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFLOW_")}
        for variable in container["env"]:
            field = (variable.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            env[variable["name"]] = (
                namespace if field == "metadata.namespace" else variable["value"]
            )
        env["HOME"] = str(home)
        self.process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.output: str | None = None

    @staticmethod
    def _own_port(arg: str) -> str:
        if arg.startswith("--liveness="):
            return f"--liveness=http://127.0.0.1:{_free_port()}/healthz"
        if arg.startswith("--ui-port="):
            return f"--ui-port={_free_port()}"
        return arg

    def stop(self) -> str:
        """SIGTERM, as the kubelet stops a pod; what the operator printed."""
        if self.output is None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            self.output, _ = self.process.communicate(timeout=60)
        return self.output


@pytest.fixture
def install(
    operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., Installed]]:
    """``install(image=...)`` runs the operator as the default manifests install it."""
    started: list[Installed] = []

    def start(*, image: str | None) -> Installed:
        started.append(
            Installed(image=image, kubeconfig=operator_kubeconfig, namespace=namespace,
                      home=tmp_path)
        )  # fmt: skip
        return started[-1]

    yield start
    for installed in started:
        installed.stop()


def _apply(kubectl: Kubectl, namespace: str, *, image: str, bootstrap: str) -> str:
    body = spec.body(
        make_application(bootstrap=bootstrap), namespace=namespace,
        pods=spec.PodSettings(image=image),
    )  # fmt: skip
    kubectl("apply", "-f", "-", input=json.dumps(body))
    return str(body["metadata"]["name"])


def _condition(kubectl: Kubectl, namespace: str, name: str, kind: str) -> dict[str, Any]:
    found = get_json(kubectl, "sfapp", name, "-n", namespace).get("status")
    return {"phase": (found or {}).get("phase"), **(status.condition(found, kind) or {})}


def _wait(installed: Installed, condition: Callable[[], Any], *, what: str) -> Any:
    return wait_until(
        condition,
        what=what,
        timeout=WAIT_S,
        interval=POLL_S,
        gave_up=exited(installed.process, "streamflow operator run"),
        explain=installed.stop,
    )


def _refused(kubectl: Kubectl, namespace: str, name: str, installed: Installed) -> dict[str, Any]:
    def reconciled() -> dict[str, Any] | None:
        found = _condition(kubectl, namespace, name, "Reconciled")
        return found if found["phase"] == "Failed" else None

    return _wait(installed, reconciled, what=f"{name} to be refused")  # type: ignore[no-any-return]


def _images_in(kubectl: Kubectl, namespace: str) -> set[str]:
    """The images of every Deployment and Job in the namespace."""
    found = set()
    for kind in ("deployments", "jobs"):
        for item in get_json(kubectl, kind, "-n", namespace)["items"]:
            found |= {c["image"] for c in item["spec"]["template"]["spec"]["containers"]}
    return found


def test_installed_with_the_defaults_a_foreign_image_is_refused_and_its_own_registry_admitted(
    install: Callable[..., Installed], kubectl: Kubectl, namespace: str
) -> None:
    # No pod may start: the admitted application's verifier Job runs while the test looks.
    kubectl("create", "quota", "no-pods", "--hard=pods=0", "-n", namespace)
    installed = install(image=OPERATOR_IMAGE)
    foreign = _apply(kubectl, namespace, image=FOREIGN_IMAGE, bootstrap="kafka.invalid:9092")
    admitted = _apply(kubectl, namespace, image=TEST_IMAGE, bootstrap="kafka.invalid:9092")

    refused = _refused(kubectl, namespace, foreign, installed)
    assert (refused["status"], refused["reason"]) == ("False", "ImageNotAllowed")
    assert f"image '{FOREIGN_IMAGE}' is not allowed" in refused["message"]
    assert "allowed: registry.example/" in refused["message"]  # the operator's own registry
    _wait(
        installed,
        lambda: _condition(kubectl, namespace, admitted, "Verified").get("reason") == "Verifying",
        what="the admitted application's verifier Job",
    )
    events = get_json(kubectl, "events", "-n", namespace)["items"]
    assert any(
        e["type"] == "Warning" and e["involvedObject"]["name"] == foreign
        and FOREIGN_IMAGE in e["message"]
        for e in events
    )  # fmt: skip
    assert _images_in(kubectl, namespace) == {TEST_IMAGE}  # nothing runs the foreign image
    output = installed.stop()
    assert installed.process.returncode == 0, output
    assert (
        f"admits the images under registry.example/, the registry of its own image "
        f"{OPERATOR_IMAGE}" in output
    ), output
    assert "Traceback" not in output and "Forbidden" not in output


def test_installed_with_the_default_image_no_image_is_admitted_until_one_is_named(
    install: Callable[..., Installed], kubectl: Kubectl, namespace: str
) -> None:
    """The manifests' own default image (``streamflow:VERSION``) names no registry of its own."""
    installed = install(image=None)
    foreign = _apply(kubectl, namespace, image=FOREIGN_IMAGE, bootstrap="kafka.invalid:9092")

    refused = _refused(kubectl, namespace, foreign, installed)
    assert (refused["status"], refused["reason"]) == ("False", "ImageNotAllowed")
    assert FOREIGN_IMAGE in refused["message"] and "admits no image" in refused["message"]
    assert "--allowed-images" in refused["message"]
    assert _images_in(kubectl, namespace) == set()
    output = installed.stop()
    assert installed.process.returncode == 0, output
    assert f"admits no image: its own image {manifests.DEFAULT_IMAGE} names no registry" in output
