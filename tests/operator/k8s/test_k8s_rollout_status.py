"""A model rollout in the StreamflowApplication's status, read by the operator from Kafka.

The wine rollout example runs on kwok (its pods never run), so the test writes what
its parts would: the models' control records through the same API `streamflow model
rollout` uses, and a decision as the rollout controller writes it. The operator
learns the serving streamlet's control topic and its controller's decision topic from
the verifier, reads both on the session's broker, and writes `status.rollouts`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from streamflow.blueprint.model import Application
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.operator.kubernetes.target import KubernetesTarget
from streamflow.operator.model_rollouts import DECISION, Rollouts
from streamflow.operator.model_versions import ModelChannel, PushRequest
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import POLL_S, WAIT_S, OperatorThread, make_application
from tests.operator.k8s.test_k8s_operator import app_resource, cli
from tests.waiting import wait_until

ROLLOUT = Path(__file__).parents[3] / "blueprints" / "wine" / "rollout.yaml"
SERVER = "http://models.example:8080"  # a model server's URL: a descriptor with no artifact

StartOperator = Callable[..., OperatorThread]


def decision(**fields: Any) -> dict[str, Any]:
    arm = {"records": 400, "failures": 0, "labelled": 120, "correct": 110}
    return {
        "model": "wine",
        "stable_version": 1,
        "candidate_version": 2,
        "sequence": 1,
        "step": 1,
        "steps": 3,
        "mode": "canary",
        "share": 25.0,
        "verdict": "ADVANCE",
        "reason": "candidate accuracy within the margin over 2 windows",
        "windows": 2,
        "stable": arm,
        "candidate": arm,
        "time": dt.datetime(2026, 12, 7, 12, 0, 5, tzinfo=dt.UTC),
        **fields,
    }


def write_decision(app: Application, bootstrap: str, record: dict[str, Any]) -> None:
    topic = app.topic_for("controller", "decisions")
    assert topic is not None
    codec = Codecs(app, SchemaStore(app.schema_paths)).for_topic(topic, DECISION, producing=True)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic.name, key=b"wine", value=codec.encode(record))
    assert producer.flush(30) == 0


def rollout_status(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (app_resource(kubectl, namespace, name).get("status") or {}).get(
        "rollouts"
    ) or {}
    return found


def wait_rollout(kubectl: Kubectl, namespace: str, name: str, wanted: dict[str, Any]) -> None:
    wait_until(
        lambda: rollout_status(kubectl, namespace, name).get("classifier") == wanted,
        what=f"status.rollouts.classifier to be {wanted}",
        timeout=WAIT_S,
        interval=POLL_S,
        explain=lambda: f"it is {rollout_status(kubectl, namespace, name).get('classifier')}",
    )


def test_the_status_carries_the_rollout_its_split_and_the_last_decision(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    kafka_bootstrap: str,
    kube_cluster: Any,
) -> None:
    app = make_application(bootstrap=kafka_bootstrap, blueprint=ROLLOUT, prefix="wine-rollout")
    namespace, name = target.namespace, app.name
    start_operator(rollouts_s=0.2)
    target.deploy(app, bootstrap=None)
    models = app.topic_for("classifier", "model")
    decisions = app.topic_for("controller", "decisions")
    assert models is not None and decisions is not None

    def verified() -> dict[str, Any]:
        status = app_resource(kubectl, namespace, name).get("status") or {}
        found: dict[str, Any] = ((status.get("verified") or {}).get("streamlets") or {}).get(
            "classifier"
        ) or {}
        return found

    wait_until(lambda: verified().get("controlTopic"), what="the verifier's facts",
               timeout=WAIT_S, interval=POLL_S)  # fmt: skip
    assert verified()["decisionTopics"] == [decisions.name]
    assert (
        "controlTopic"
        not in (
            app_resource(kubectl, namespace, name)["status"]["verified"]["streamlets"]["evidence"]
        )
    )

    channel = ModelChannel(app, KafkaClients(bootstrap=kafka_bootstrap), "classifier")
    channel.push(PushRequest(url=SERVER, name="wine"))
    wait_rollout(kubectl, namespace, name, {"model": "wine", "stable": 1})

    rollouts = Rollouts(channel)
    rollouts.start(PushRequest(url=SERVER), Rollout(RolloutMode.CANARY, share=25.0))
    running = {"model": "wine", "stable": 1, "candidate": 2, "mode": "canary", "share": 25.0}
    wait_rollout(kubectl, namespace, name, running)

    write_decision(app, kafka_bootstrap, decision())
    write_decision(app, kafka_bootstrap, decision())  # a controller's retry: one decision
    last = {
        "candidate": 2,
        "sequence": 1,
        "verdict": "ADVANCE",
        "step": 1,
        "steps": 3,
        "mode": "canary",
        "share": 25.0,
        "reason": "candidate accuracy within the margin over 2 windows",
        "windows": 2,
        "decidedAt": "2026-12-07T12:00:05Z",
    }
    wait_rollout(kubectl, namespace, name, {**running, "lastDecision": last})

    # `streamflow status` on the cluster shows the split and the decision from the status
    shown = cli(kube_cluster, namespace, "status", name, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    classifier = next(
        s for s in json.loads(shown.stdout)["streamlets"] if s["name"] == "classifier"
    )
    assert classifier["model"] == "wine:1 + candidate wine:2 (canary 25% of the keys)"
    assert classifier["last_decision"]["verdict"] == "ADVANCE"
    table = cli(kube_cluster, namespace, "status", name)
    assert (
        "classifier  last decision on wine:2: ADVANCE at step 1 of 3 (canary), 2 windows: "
        "candidate accuracy within the margin over 2 windows" in table.stdout
    ), table.stdout

    # a reconcile (a scale) writes the whole status again: the rollout stays in it
    generation = app_resource(kubectl, namespace, name)["metadata"]["generation"]
    scaled = cli(kube_cluster, namespace, "scale", name, "decisions", "2")
    assert scaled.returncode == 0, scaled.stderr
    wait_until(
        lambda: (
            (app_resource(kubectl, namespace, name).get("status") or {}).get("observedGeneration")
            == generation + 1
        ),
        what="the scale to be reconciled",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert rollout_status(kubectl, namespace, name)["classifier"] == {
        **running,
        "lastDecision": last,
    }

    write_decision(app, kafka_bootstrap, decision(sequence=2, verdict="ROLLBACK", reason="worse"))
    rollouts.abort()
    rolled_back = {**last, "sequence": 2, "verdict": "ROLLBACK", "reason": "worse"}
    wait_rollout(
        kubectl, namespace, name, {"model": "wine", "stable": 1, "lastDecision": rolled_back}
    )
