"""The wine classifier on a real node, the way a platform engineer deploys it.

Everything here runs for real: the images come from `streamflow build` (the
streamflow image for the operator, the application's image for its streamlets
and its verifier Job), a kubelet with containerd and runc runs them, and the
commands are the README's, run as a user runs them:

    streamflow operator manifests --image OPERATOR | kubectl apply -f -
    streamflow deploy blueprints/wine/classifier.yaml --target kubernetes --image APP
    streamflow scale / configure / logs / undeploy

Records are counted at the end of the pipeline: every wine of the data set
comes out as a prediction (none lost), through real pods, a scale to three
classifiers, a classifier pod killed and replaced, and a `configure` that rolls
only its own streamlet.

Then the rollout example (`blueprints/wine/rollout.yaml`) runs on the same node: its
controller's pod rolls a worse candidate back and promotes a better one, which the
operator reads into the StreamflowApplication's `status.rollouts`.

The pods' network cannot reach this host's loopback, so the module has a Kafka
broker of its own, listening on the node's host address. The tests share one
deployment and run in order: each step starts from where the last one left it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamflow import devkit
from streamflow.operator.kubernetes.names import APP_LABEL, STREAMLET_LABEL
from tests.image_fixtures import CLASSIFIER, BuiltImages
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(3600)

STREAMFLOW = Path(sys.executable).with_name("streamflow")
APP = "wine-classifier"
_WAIT_S = 600.0  # pods import TensorFlow and load a model: slow on a loaded 2-core machine
_POLL_S = 1.0


@dataclass
class Deployed:
    node: devkit.RealNode
    kafka: devkit.KafkaBroker
    images: BuiltImages
    namespace: str
    env: dict[str, str]
    samples: int  # wines in the data set the samples streamlet replays
    follower: _Follower | None = None  # made by the first `predictions()`

    def cli(self, *args: str, timeout: float = _WAIT_S) -> subprocess.CompletedProcess[str]:
        """`streamflow ARGS` against the node's cluster; fails the test on a non-zero exit."""
        result = self.try_cli(*args, timeout=timeout)
        assert result.returncode == 0, (
            f"streamflow {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        )
        return result

    def try_cli(self, *args: str, timeout: float = _WAIT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(STREAMFLOW), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def k8s(self, *args: str) -> list[str]:
        """The options that point a CLI command at the application on the node."""
        return [*args, "--target", "kubernetes", "--kubeconfig", str(self.node.cluster.kubeconfig),
                "-n", self.namespace]  # fmt: skip

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.node.kubectl("-n", self.namespace, *args, input=input, timeout=120).stdout

    def pods(self, streamlet: str | None = None) -> list[dict[str, Any]]:
        selector = f"{APP_LABEL}={APP}"
        if streamlet is not None:
            selector += f",{STREAMLET_LABEL}={streamlet}"
        return list(json.loads(self.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"])

    def predictions(self) -> Counter[str]:
        """How many predictions of each wine id are on the predictions topic, as one
        `streamflow tail -f` has printed them so far (made again if it has ended)."""
        if self.follower is None or self.follower.ended():
            if self.follower is not None:
                self.follower.stop()
            self.follower = _Follower(
                [str(STREAMFLOW), "tail", str(CLASSIFIER), "wine-predictions", "-f",
                 "-n", "100000", "-o", "json", "-b", self.kafka.bootstrap_servers],
                env=self.env,
            )  # fmt: skip
        return self.follower.counts()


class _Follower:
    """A `streamflow tail -f -o json` in the background, counting the ids it prints.

    One process for the whole module, as a user would leave it running in a second
    terminal, rather than a new CLI (and a read of the whole topic) for every poll.
    """

    def __init__(self, command: list[str], *, env: dict[str, str]) -> None:
        self._process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._unreadable: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if not line.strip():
                continue
            try:
                wine = str(json.loads(line)["value"]["id"])
            except (ValueError, KeyError, TypeError):  # not a prediction: the test says so
                with self._lock:
                    self._unreadable.append(line)
                continue
            with self._lock:
                self._counts[wine] += 1

    def counts(self) -> Counter[str]:
        with self._lock:
            assert not self._unreadable, f"tail printed what is no prediction: {self._unreadable}"
            return Counter(self._counts)

    def ended(self) -> bool:
        """It exited: the topic was not there yet (the app makes it when it deploys)."""
        return self._process.poll() is not None and not self._reader.is_alive()

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._reader.join(timeout=30)


def pipeline_state(deployed: Deployed, expected: int) -> str:
    """What a failed count needs: the wines short of ``expected`` predictions, the
    application's status (lag per streamlet), and the last lines of every pod's log."""
    counts = deployed.predictions()
    short = sorted(i for i in counts if counts[i] < expected)
    lines = [
        f"{len(counts)} wines predicted; {len(short)} fewer than {expected} times: {short[:20]}",
        deployed.try_cli(*deployed.k8s("status", APP)).stdout,
    ]
    for pod in deployed.pods():
        name = pod["metadata"]["name"]
        tail = deployed.node.kubectl(
            "-n", deployed.namespace, "logs", name, "--tail", "40", check=False, timeout=60
        )
        lines += [f"--- {name} ({pod.get('status', {}).get('phase')})", tail.stdout, tail.stderr]
    return "\n".join(lines)


def running(pod: dict[str, Any]) -> bool:
    """A real container started and passed its readiness probe, and is not being deleted."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (
        "deletionTimestamp" not in pod["metadata"]
        and pod.get("status", {}).get("phase") == "Running"
        and bool(statuses)
        and all(s.get("ready") and "running" in (s.get("state") or {}) for s in statuses)
    )


def ready_pods(deployed: Deployed, streamlet: str) -> list[dict[str, Any]]:
    return [pod for pod in deployed.pods(streamlet) if running(pod)]


@pytest.fixture(scope="module")
def deployed(
    real_node: devkit.RealNode,
    wine_images: BuiltImages,
    wine_models_in_place: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployed]:
    data = (wine_models_in_place / "wine-sample.jsonl").read_text().splitlines()
    samples = sum(1 for line in data if line.strip())
    real_node.import_image(wine_images.operator_archive, name=wine_images.operator)
    real_node.import_image(wine_images.app_archive, name=wine_images.app)
    kafka = devkit.KafkaBroker(host=real_node.host_address)
    kafka.start()
    namespace = f"wine-{uuid.uuid4().hex[:8]}"
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFLOW_")}
    env |= {"STREAMFLOW_HOME": str(home), "COLUMNS": "250", "NO_COLOR": "1"}
    found = Deployed(real_node, kafka, wine_images, namespace, env, samples)
    try:
        real_node.kubectl("create", "namespace", namespace)
        manifests = found.cli("operator", "manifests", "--image", wine_images.operator,
                              "-n", namespace).stdout  # fmt: skip
        real_node.kubectl("apply", "-f", "-", input=manifests, timeout=120)
        yield found
    finally:
        if found.follower is not None:
            found.follower.stop()
        real_node.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kafka.stop()


def test_the_operator_runs_in_a_pod_of_the_streamflow_image(deployed: Deployed) -> None:
    def operator_pod() -> dict[str, Any] | None:
        items = json.loads(deployed.kubectl("get", "pods", "-o", "json"))["items"]
        for pod in items:
            if running(pod) and pod["spec"]["containers"][0]["image"] == deployed.images.operator:
                return dict(pod)
        return None

    wait_until(
        lambda: operator_pod() is not None,
        what="the operator's pod running and ready",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )


def test_the_application_deploys_after_its_own_image_verified_it(deployed: Deployed) -> None:
    assert deployed.samples > 100, "the wine data set is missing"
    deployed.cli(*deployed.k8s("deploy", str(CLASSIFIER), "--image", deployed.images.app,
                               "-b", deployed.kafka.bootstrap_servers,
                               "--set", "samples.loop=false", "--set", "accuracy.every=25",
                               "--timeout", f"{_WAIT_S:.0f}s"))  # fmt: skip
    resource = json.loads(deployed.kubectl("get", "streamflowapplications", APP, "-o", "json"))
    conditions = {c["type"]: c for c in resource["status"]["conditions"]}
    assert conditions["Verified"]["status"] == "True", conditions
    assert resource["status"]["phase"] == "Running"
    for streamlet in ("samples", "models", "classifier", "accuracy"):
        pods = ready_pods(deployed, streamlet)
        assert pods, f"no running pod of {streamlet}"
        assert {p["spec"]["containers"][0]["image"] for p in pods} == {deployed.images.app}


def test_every_wine_comes_out_as_a_prediction(deployed: Deployed) -> None:
    wait_until(
        lambda: len(deployed.predictions()) == deployed.samples,
        what=f"a prediction of each of the {deployed.samples} wines",
        timeout=_WAIT_S,
        interval=_POLL_S,
        explain=lambda: pipeline_state(deployed, 1),
    )


def test_scale_runs_three_real_classifier_pods(deployed: Deployed) -> None:
    deployed.cli(*deployed.k8s("scale", APP, "classifier=3"))
    wait_until(
        lambda: len(ready_pods(deployed, "classifier")) == 3,
        what="three classifier pods running",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )


def test_a_killed_pod_is_replaced_by_a_new_container(deployed: Deployed) -> None:
    victim = ready_pods(deployed, "classifier")[0]["metadata"]["name"]
    deployed.kubectl("delete", "pod", victim, "--wait=false")

    def replaced() -> bool:
        names = {p["metadata"]["name"] for p in ready_pods(deployed, "classifier")}
        return len(names) == 3 and victim not in names

    wait_until(
        replaced, what="the killed classifier pod replaced", timeout=_WAIT_S, interval=_POLL_S
    )


def test_logs_come_from_the_pods(deployed: Deployed) -> None:
    pod = ready_pods(deployed, "accuracy")[0]["metadata"]["name"]
    wait_until(
        lambda: "accuracy:" in deployed.kubectl("logs", pod),
        what="the accuracy logger's lines in kubectl logs",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )
    ours = deployed.cli(*deployed.k8s("logs", APP, "accuracy", "--tail", "50")).stdout
    assert "accuracy:" in ours


def test_configure_rolls_only_its_streamlet_and_nothing_is_lost(deployed: Deployed) -> None:
    def uids(streamlet: str) -> set[str]:
        return {p["metadata"]["uid"] for p in ready_pods(deployed, streamlet)}

    others = {s: uids(s) for s in ("models", "classifier", "accuracy")}
    samples_before = uids("samples")
    deployed.cli(*deployed.k8s("configure", APP, "--set", "samples.rate=50"))
    wait_until(
        lambda: bool(uids("samples")) and not uids("samples") & samples_before,
        what="a new samples pod running",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )
    assert {s: uids(s) for s in others} == others  # nobody else rolled
    # the new samples pod replays the data set through the three classifiers,
    # one of them the replacement of the killed pod: every wine comes out again
    wait_until(
        lambda: min(deployed.predictions().values(), default=0) >= 2,
        what=f"a second prediction of each of the {deployed.samples} wines",
        timeout=_WAIT_S,
        interval=_POLL_S,
        explain=lambda: pipeline_state(deployed, 2),
    )
    counts = deployed.predictions()
    assert len(counts) == deployed.samples


def test_undeploy_removes_everything(deployed: Deployed) -> None:
    deployed.cli(*deployed.k8s("undeploy", APP, "--timeout", "300s"))
    left = deployed.kubectl("get", "deployments,pods,configmaps,services,jobs",
                            "-l", f"{APP_LABEL}={APP}", "-o", "name")  # fmt: skip
    assert left.strip() == ""
    gone = deployed.node.kubectl("-n", deployed.namespace, "get", "streamflowapplications",
                                 "-o", "name", timeout=60).stdout  # fmt: skip
    assert gone.strip() == ""


ROLLOUT = CLASSIFIER.with_name("rollout.yaml")
ROLLOUT_APP = "wine-rollout"


def rollout_pods(deployed: Deployed, streamlet: str) -> list[dict[str, Any]]:
    selector = f"{APP_LABEL}={ROLLOUT_APP},{STREAMLET_LABEL}={streamlet}"
    pods = json.loads(deployed.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
    return [pod for pod in pods if running(pod)]


def rollout_entry(deployed: Deployed) -> dict[str, Any]:
    """``status.rollouts.classifier`` of the rollout app's StreamflowApplication."""
    found = json.loads(deployed.kubectl("get", "streamflowapplications", ROLLOUT_APP, "-o", "json"))
    entry: dict[str, Any] = ((found.get("status") or {}).get("rollouts") or {}).get(
        "classifier"
    ) or {}
    return entry


def rollout_state(deployed: Deployed) -> str:
    """What a failed wait needs: the status entry and the rollout's parts' last log lines."""
    lines = [f"status.rollouts.classifier: {rollout_entry(deployed)}"]
    for streamlet in ("classifier", "evidence", "controller"):
        for pod in rollout_pods(deployed, streamlet):
            name = pod["metadata"]["name"]
            tail = deployed.node.kubectl(
                "-n", deployed.namespace, "logs", name, "--tail", "15", check=False, timeout=60
            ).stdout
            lines.append(f"--- {name}\n{tail}")
    return "\n".join(lines)


def test_a_rollout_through_the_operator_rolls_back_a_worse_model_and_promotes_a_better(
    deployed: Deployed, wine_models_in_place: Path
) -> None:
    """The rollout example on real pods: the operator deploys it, `model rollout start`
    writes each candidate, and the controller's pod rolls the worse one (train.py's v3)
    back and walks the better one (v2) to a promotion; the StreamflowApplication's
    status and `streamflow status` say so, and no classifier pod restarted."""
    bootstrap = deployed.kafka.bootstrap_servers
    deployed.cli(*deployed.k8s("deploy", str(ROLLOUT), "--image", deployed.images.app,
                               "-b", bootstrap, "--timeout", f"{_WAIT_S:.0f}s"))  # fmt: skip
    classifiers = {p["metadata"]["uid"] for p in rollout_pods(deployed, "classifier")}
    assert len(classifiers) == 2

    def entry_is(wanted: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        found: dict[str, Any] = wait_until(
            lambda: (e := rollout_entry(deployed)) and wanted(e) and e,
            what=what,
            timeout=_WAIT_S,
            interval=_POLL_S,
            explain=lambda: rollout_state(deployed),
        )
        return found

    stable = entry_is(lambda e: e.get("stable"), "the published wine:1 in the status")["stable"]

    def start(model: str) -> None:
        deployed.cli("model", "rollout", "start", str(ROLLOUT), "classifier",
                     "--keras", str(wine_models_in_place / model), "-b", bootstrap)  # fmt: skip

    def ended(verdict: str, stable: int) -> Callable[[dict[str, Any]], bool]:
        # one condition on the whole entry: the decision and the END that goes with it are
        # one transaction, but a tick reads the model topic before the decisions
        return lambda e: (
            (e.get("lastDecision") or {}).get("verdict") == verdict
            and e.get("stable") == stable
            and "candidate" not in e
        )

    start("wine-v3.keras")  # the next version, worse on purpose
    rolled_back = entry_is(ended("ROLLBACK", stable), "the worse candidate rolled back")
    worse = rolled_back["lastDecision"]["candidate"]
    assert worse > stable

    start("wine-v2.keras")  # the version after it
    better = worse + 1
    promoted = entry_is(ended("PROMOTE", better), f"the better candidate, {better}, promoted")
    assert promoted["lastDecision"]["candidate"] == better
    shown = deployed.cli(*deployed.k8s("status", ROLLOUT_APP)).stdout
    assert f"last decision on wine:{better}: PROMOTE" in shown, shown
    # promoted and rolled back live: the same classifier pods, never restarted
    pods = rollout_pods(deployed, "classifier")
    assert {p["metadata"]["uid"] for p in pods} == classifiers
    assert all(s["restartCount"] == 0 for p in pods for s in p["status"]["containerStatuses"])
    deployed.cli(*deployed.k8s("undeploy", ROLLOUT_APP, "--timeout", "300s"))
