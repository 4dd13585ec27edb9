"""Mistakes on the Kubernetes target are caught before anything changes, and said plainly.

The API server's schema rejects a malformed resource and names the field;
the target rejects an unknown streamlet, a negative count or a wrong-typed
config value before it patches; an unreachable API server is one sentence,
never a traceback. None of this needs the operator running.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import spec
from streamflow.operator.kubernetes.target import KubernetesTarget
from streamflow.operator.targets import TargetError
from streamflow.runtime.topics import ensure_topics
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import TEST_IMAGE

STREAMFLOW = Path(sys.executable).with_name("streamflow")


def resource_with(application: Application, namespace: str, **changes: Any) -> str:
    """The application's resource with ``path=value`` changes (path: dots between keys)."""
    body = spec.body(application, namespace=namespace, pods=spec.PodSettings(image=TEST_IMAGE))
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = body["spec"]
        for key in parents:
            node = node[key]
        node[last] = value
    return json.dumps(body)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"streamlets__scorer__replicas": -1}, "spec.streamlets.scorer.replicas"),
        ({"streamlets__scorer__guarantee": "sometimes"}, "spec.streamlets.scorer.guarantee"),
        ({"topics__samples__partitions": 0}, "spec.topics.samples.partitions"),
        ({"name": "Not A Label"}, "spec.name"),
        ({"streamlets": {}}, "spec.streamlets"),
    ],
)
def test_the_schema_rejects_a_malformed_resource_and_names_the_field(
    kubectl: Kubectl,
    namespace: str,
    application: Application,
    change: dict[str, Any],
    field: str,
) -> None:
    renamed = application.to_dict()
    renamed["topics"] = {"samples": next(iter(renamed["topics"].values()))}
    body = resource_with(Application.from_dict(renamed), namespace, **change)
    with pytest.raises(devkit.DevkitError) as caught:
        kubectl("apply", "-f", "-", input=body)
    assert field in str(caught.value)
    assert kubectl("get", "sfapp", "-n", namespace, "-o=name") == ""


@pytest.fixture
def deployed(target: KubernetesTarget, application: Application) -> str:
    """The application's resource, with no operator to act on it."""
    target.deploy(application, bootstrap=None)
    return application.name


def test_scale_rejects_an_unknown_streamlet_and_a_negative_count_before_patching(
    target: KubernetesTarget, kubectl: Kubectl, deployed: str
) -> None:
    version = json.loads(kubectl("get", "sfapp", deployed, "-n", target.namespace, "-o=json"))
    with pytest.raises(TargetError) as unknown:
        target.scale(deployed, {"scorrer": 2})
    assert "no streamlet 'scorrer'" in " ".join(unknown.value.problems)
    assert "scorer" in " ".join(unknown.value.problems)  # the streamlets it has
    with pytest.raises(TargetError) as negative:
        target.scale(deployed, {"scorer": -1})
    assert "0 or more" in " ".join(negative.value.problems)
    after = json.loads(kubectl("get", "sfapp", deployed, "-n", target.namespace, "-o=json"))
    assert after["metadata"]["resourceVersion"] == version["metadata"]["resourceVersion"]


def test_configure_rejects_a_wrong_typed_value_before_patching(
    target: KubernetesTarget, kubectl: Kubectl, deployed: str, kube_cluster: devkit.KubeCluster
) -> None:
    with pytest.raises(TargetError) as caught:
        target.configure(deployed, {"scorer.threshold": "high", "logger.every": "0"})
    problems = " ".join(caught.value.problems)
    assert "scorer.threshold=high" in problems and "logger.every=0" in problems
    stored = json.loads(kubectl("get", "sfapp", deployed, "-n", target.namespace, "-o=json"))
    assert stored["spec"]["streamlets"]["scorer"]["config"] == {"threshold": 6.0}

    command = [
        str(STREAMFLOW), "configure", deployed, "--set=scorer.threshold=high",
        "--target=kubernetes", f"--kubeconfig={kube_cluster.kubeconfig}",
        f"--namespace={target.namespace}", "--no-wait",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "scorer.threshold" in result.stderr and "Traceback" not in result.stderr


def test_logs_of_an_unknown_streamlet_or_one_without_pods_are_a_clear_message(
    target: KubernetesTarget, deployed: str
) -> None:
    with pytest.raises(TargetError) as caught:
        next(iter(target.logs(deployed, "scorer", follow=False)))
    assert "has no pods" in caught.value.message  # no operator here, so no pods
    with pytest.raises(TargetError) as unknown:
        next(iter(target.logs(deployed, "nope", follow=False)))
    assert "no streamlet 'nope'" in unknown.value.message


def test_undeploy_with_delete_topics_deletes_them(
    target: KubernetesTarget, application: Application, kafka_bootstrap: str, deployed: str
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, application)
    deleted = target.undeploy(deployed, delete_topics=True)
    assert set(application.topics) <= set(deleted)
    with pytest.raises(TargetError, match="no application"):
        target.status(deployed)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def unreachable_kubeconfig(kube_cluster: devkit.KubeCluster, tmp_path: Path) -> Path:
    """The cluster's kubeconfig, pointed at a port nothing listens on."""
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{closed_port()}"
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_unreachable_api_server_is_a_clear_error(unreachable_kubeconfig: Path) -> None:
    target = KubernetesTarget(kubeconfig=str(unreachable_kubeconfig), namespace="default")
    with pytest.raises(TargetError, match="cannot reach the Kubernetes API server") as caught:
        target.status("anything")
    assert "connection refused" in caught.value.message

    for args in (
        ["status", "anything", "--target=kubernetes"],
        ["scale", "anything", "scorer", "2", "--target=kubernetes", "--no-wait"],
        ["operator", "run"],
    ):
        result = subprocess.run(
            [str(STREAMFLOW), *args, f"--kubeconfig={unreachable_kubeconfig}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, (args, result.stderr)
        assert "cannot reach the Kubernetes API server" in result.stderr
        assert "Traceback" not in result.stderr
