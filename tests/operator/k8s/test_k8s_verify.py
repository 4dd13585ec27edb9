"""The operator verifies every spec with the CLI's verifier, one child process per application.

A resource applied straight with kubectl, past ``streamflow verify``, is
refused for the same reasons: ``Failed``, its problems located in the spec in
the ``Verified`` condition, a Warning event, and nothing created. Two
applications whose modules share a name are each verified against their own
module, and none of their code is imported into the operator's process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import spec
from streamflow.operator.kubernetes.verify import Verifier
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import POLL_S, WAIT_S, OperatorThread, get_json, make_application
from tests.waiting import wait_until

STREAMFLOW = Path(sys.executable).with_name("streamflow")
WINE = Path(__file__).parents[3] / "blueprints" / "wine"
NAMESAKE = Path(__file__).parent / "namesake"

IMAGE = "reg.example/wine:1"
StartOperator = Callable[..., OperatorThread]
Change = Callable[[dict[str, Any]], None]


def _topics(data: dict[str, Any]) -> tuple[str, str]:
    samples, scores = data["topics"]  # the test application's two topics, in order
    return samples, scores


def schema_mismatch(data: dict[str, Any]) -> None:
    samples, scores = _topics(data)
    data["topics"][scores]["consumers"] = []
    data["topics"][samples]["consumers"] = ["scorer.in", "logger.in"]  # logger reads scores


def unknown_port(data: dict[str, Any]) -> None:
    data["topics"][_topics(data)[0]]["consumers"] = ["scorer.nope"]


def unknown_class(data: dict[str, Any]) -> None:
    data["streamlets"]["logger"]["class"] = "wine_app:NoSuchLogger"


def unconnected_inlet(data: dict[str, Any]) -> None:
    data["topics"][_topics(data)[1]]["consumers"] = []


# each mistake: the problem's code, and where in the resource it is
MISTAKES: dict[str, tuple[Change, str, str]] = {
    "mismatch": (schema_mismatch, "incompatible-schema", "spec.topics.samples-"),
    "port": (unknown_port, "unknown-port", "spec.topics.samples-"),
    "class": (unknown_class, "class-not-found", "spec.streamlets.logger.class"),
    "inlet": (unconnected_inlet, "unconnected-inlet", "spec.streamlets.logger"),
}


def broken(change: Change, *, bootstrap: str) -> Application:
    data = make_application(bootstrap=bootstrap).to_dict()
    change(data)
    return Application.from_dict(data)


def test_the_child_finds_each_problem_and_names_its_place_in_the_spec() -> None:
    verifier = Verifier()
    for change, code, where in MISTAKES.values():
        verdict = verifier.verify(broken(change, bootstrap="kafka:9092"))
        assert not verdict.ok and verdict.error is None
        found = [(p["code"], p["where"]) for p in verdict.errors]
        assert any(c == code and w.startswith(where) for c, w in found), found
    assert verifier.spawned == len(MISTAKES)


def test_an_unchanged_spec_is_verified_once_and_a_failed_child_is_not_cached() -> None:
    verifier = Verifier()
    app = make_application(bootstrap="kafka:9092")
    first = verifier.verify(app)
    assert first.ok and first.facts["scorer"].config == {"threshold": 6.0}
    assert first.facts["ingress"].http_port == 8000
    assert verifier.verify(app) is first and verifier.spawned == 1
    broken_python = Verifier(python=str(Path(sys.executable).with_name("no-such-python")))
    for _ in range(2):
        verdict = broken_python.verify(app)
        assert not verdict.ok and verdict.error and "could not be started" in verdict.error
    assert broken_python.spawned == 2


def test_resources_the_verifier_rejects_fail_with_their_problems_and_get_no_children(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, kafka_bootstrap: str
) -> None:
    start_operator()
    expected = {}
    for label, (change, code, where) in MISTAKES.items():
        app = broken(change, bootstrap=kafka_bootstrap)
        body = spec.body(app, namespace=namespace, pods=spec.PodSettings(image=IMAGE))
        kubectl("apply", "-f", "-", input=json.dumps(body))
        expected[body["metadata"]["name"]] = (label, code, where)

    for name, (label, code, where) in expected.items():

        def failed(name: str = name) -> dict[str, Any] | None:
            status = get_json(kubectl, "sfapp", name, "-n", namespace).get("status") or {}
            verified = _condition(status, "Verified")
            return verified if status.get("phase") == "Failed" and verified else None

        verified = wait_until(
            failed,
            what=f"{label}: {name} to fail its verification",
            timeout=WAIT_S,
            interval=POLL_S,
        )
        assert verified["status"] == "False" and verified["reason"] == "ProblemsFound"
        assert code in verified["message"] and where in verified["message"], verified
        wait_until(
            lambda name=name: "VerificationFailed" in _warnings(kubectl, namespace, name),
            what=f"the Warning event of {name}",
            timeout=WAIT_S,
            interval=POLL_S,
        )

    for kind in ("deployments", "configmaps", "services"):
        listing = get_json(kubectl, kind, "-n", namespace, "-l", "streamflow.io/app")
        assert listing["items"] == [], f"{kind} were created for applications that do not verify"


def test_two_applications_whose_modules_share_a_name_are_each_verified_against_their_own(
    start_operator: StartOperator,
    kube_cluster: devkit.KubeCluster,
    kubectl: Kubectl,
    namespace: str,
    kafka_bootstrap: str,
) -> None:
    imported_before = set(sys.modules)
    start_operator()
    # the wine classifier first, so an operator that imports classes has its module cached
    for blueprint, streamlets in ((WINE / "classifier.yaml", 4), (NAMESAKE / "blueprint.yaml", 3)):
        name = _deploy(kube_cluster, namespace, blueprint, bootstrap=kafka_bootstrap)
        _wait_running(kubectl, namespace, name, streamlets)

    config_maps = get_json(kubectl, "configmaps", "-n", namespace, "-l", "streamflow.io/app")
    configs = {
        item["metadata"]["name"]: json.loads(item["data"]["config.json"])
        for item in config_maps["items"]
    }
    namesake_config = next(
        c for n, c in configs.items() if n.endswith("-classifier") and "threshold" in c
    )
    assert namesake_config["threshold"] == 12.5
    assert any("input_fields" in c for n, c in configs.items() if n.endswith("-classifier"))
    leaked = {"classifier_app", "wine_app"} & (set(sys.modules) - imported_before)
    assert not leaked, f"application modules imported into the operator's process: {leaked}"


def _deploy(cluster: devkit.KubeCluster, namespace: str, blueprint: Path, *, bootstrap: str) -> str:
    command = [
        str(STREAMFLOW), "deploy", str(blueprint), "--target=kubernetes", "--no-wait",
        f"--kubeconfig={cluster.kubeconfig}", f"--namespace={namespace}", f"-b={bootstrap}",
        f"--image={IMAGE}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return str(yaml.safe_load(blueprint.read_text())["name"])


def _wait_running(kubectl: Kubectl, namespace: str, name: str, streamlets: int) -> None:
    def running() -> bool:
        status = get_json(kubectl, "sfapp", name, "-n", namespace).get("status") or {}
        assert status.get("phase") != "Failed", status.get("message")
        return (
            status.get("phase") == "Running" and status.get("ready") == f"{streamlets}/{streamlets}"
        )

    wait_until(running, what=f"{name} to be Running", timeout=WAIT_S, interval=POLL_S)


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _warnings(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    selector = f"involvedObject.kind=StreamflowApplication,involvedObject.name={name},type=Warning"
    listing = get_json(kubectl, "events", "-n", namespace, f"--field-selector={selector}")
    return [e["reason"] for e in listing["items"]]
