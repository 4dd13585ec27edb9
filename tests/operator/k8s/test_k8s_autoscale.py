"""Autoscaling on a real control plane: the operator's own autoscaler, and KEDA's ScaledObject.

kwok's pods never consume, which is what these tests want: records written
to the scorer's input stay unread, so its consumer group's lag holds until
the test commits the group's offsets to the end itself, as a caught-up
scorer would. The operator measures that lag on the session's broker every
second here (``autoscale_s=1``).

KEDA itself is not installed. One test installs a stand-in for its
ScaledObject CRD (cluster-wide, and left installed: no test depends on its
absence) to see what the operator writes; the fallback without KEDA is
tested by telling the operator that the cluster has none, so the order in
which the tests run does not matter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import names
from streamflow.operator.kubernetes.target import KubernetesTarget
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import POLL_S, WAIT_S, OperatorThread, get_json
from tests.operator.k8s.test_k8s_operator import app_resource, cli, event_reasons, wait_running
from tests.waiting import wait_until

KEDA_CRD = Path(__file__).with_name("keda-scaledobjects-crd.yaml")
AUTOSCALE = {"min": 1, "max": 8, "target_lag": 10, "scale_up_after": 0, "scale_down_after": 5}

StartOperator = Callable[..., OperatorThread]


@pytest.fixture(scope="module")
def keda_crd(kube_cluster: devkit.KubeCluster) -> str:
    """The ScaledObject resource type, served (discovery included), KEDA itself absent."""
    kube_cluster.kubectl("apply", f"--filename={KEDA_CRD}")
    name = "crd/scaledobjects.keda.sh"
    kube_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", name)
    wait_until(
        lambda: (
            "scaledobjects" in kube_cluster.kubectl("api-resources", "--api-group=keda.sh").stdout
        ),
        what="scaledobjects.keda.sh to be discoverable",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    return name


def autoscaled(app: Application, *, keda: bool) -> Application:
    data = app.to_dict()
    data["streamlets"]["scorer"].update(replicas=1, autoscale={**AUTOSCALE, "keda": keda})
    return Application.from_dict(data)


def scorer_input(app: Application) -> str:
    (topic,) = (
        t.name for t in app.topics.values() if any(c.streamlet == "scorer" for c in t.consumers)
    )
    return topic


def scorer_replicas(kubectl: Kubectl, namespace: str, app: Application) -> int:
    child = names.child_name(app.name, "scorer")
    found = get_json(kubectl, "deployment", child, "-n", namespace)
    return int(found["spec"]["replicas"])


def autoscale_record(kubectl: Kubectl, namespace: str, app: Application) -> dict[str, Any]:
    status = app_resource(kubectl, namespace, app.name).get("status") or {}
    return dict((status.get("autoscale") or {}).get("scorer") or {})


def condition(kubectl: Kubectl, namespace: str, app: Application, kind: str) -> dict[str, Any]:
    status = app_resource(kubectl, namespace, app.name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def wait_topics(kubectl: Kubectl, namespace: str, app: Application) -> None:
    wait_until(
        lambda: condition(kubectl, namespace, app, "TopicsReady").get("status") == "True",
        what="the TopicsReady condition",
        timeout=WAIT_S,
        interval=POLL_S,
    )


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        producer.produce(topic, value=f"record {i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def catch_up(bootstrap: str, group: str, topic: str) -> None:
    """Commit the group's offsets at the end of the topic, as replicas that kept up would."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = [
            TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p))[1])
            for p in partitions
        ]
        consumer.commit(offsets=ends, asynchronous=False)
    finally:
        consumer.close()


def autoscaled_events(kubectl: Kubectl, namespace: str, app: Application) -> list[str]:
    selector = f"involvedObject.kind=StreamflowApplication,involvedObject.name={app.name}"
    listing = get_json(kubectl, "events", "-n", namespace, f"--field-selector={selector}")
    found = [e for e in listing["items"] if e["reason"] == "Autoscaled"]
    return [e["message"] for e in sorted(found, key=lambda e: e["metadata"]["creationTimestamp"])]


def test_the_operator_scales_by_lag_up_then_down_and_says_why_without_keda(
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    kube_cluster: devkit.KubeCluster,
    application: Application,
    kafka_bootstrap: str,
) -> None:
    app = autoscaled(application, keda=True)  # asks for KEDA, which this operator is told is absent
    start_operator(autoscale_s=1, keda_installed=lambda: False)
    namespace = target.namespace
    target.deploy(app, bootstrap=None)
    wait_running(kubectl, namespace, app.name)
    wait_topics(kubectl, namespace, app)
    missing = condition(kubectl, namespace, app, "Autoscaling")
    assert (missing["status"], missing["reason"]) == ("False", "KedaMissing")
    assert "KEDA is not installed" in missing["message"]
    wait_until(
        lambda: "KedaMissing" in event_reasons(kubectl, namespace, app.name),
        what="a KedaMissing event",
        timeout=WAIT_S,
        interval=POLL_S,
    )

    produce(kafka_bootstrap, scorer_input(app), 200)  # lag 200, 10 per replica: 20 wanted
    wait_until(
        lambda: scorer_replicas(kubectl, namespace, app) == 2,
        what="the scorer scaled up to its input's 2 partitions",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    record = autoscale_record(kubectl, namespace, app)
    assert (record["by"], record["replicas"], record["decisions"]) == ("operator", 2, 1)
    assert record["reason"].startswith("scaled up") and "partitions" in record["reason"]
    # The autoscaler may look while only one partition's half of the 200 has landed: the
    # record keeps the lag it decided on (any above 10 wants both partitions' replicas).
    assert 10 < record["lag"] <= 200 and record["decidedAt"]
    assert f"lag {record['lag']} (target 10 per replica)" in record["reason"]
    shown = next(s for s in target.status(app.name).streamlets if s.name == "scorer")
    assert shown.desired == 2 and shown.autoscale is not None
    assert (shown.autoscale.replicas, shown.autoscale.min, shown.autoscale.max) == (2, 1, 8)
    assert shown.autoscale.decided_at is not None and shown.autoscale.reason

    # the record, as a script sees it: a later round that changes nothing rewrites its reason
    # (the lag as it is now), so what stays is the count, the decisions and the target
    result = cli(kube_cluster, namespace, "status", app.name, "-o", "json")
    assert result.returncode == 0, result.stderr
    [scorer] = [s for s in json.loads(result.stdout)["streamlets"] if s["name"] == "scorer"]
    seen = scorer["autoscale"]
    assert (seen["replicas"], seen["decisions"]) == (2, 1), seen
    assert "(target 10 per replica)" in seen["reason"], seen

    catch_up(kafka_bootstrap, app.consumer_group("scorer"), scorer_input(app))
    wait_until(
        lambda: scorer_replicas(kubectl, namespace, app) == 1,
        what="the scorer scaled back down to min once the lag stayed at 0 for 5 s",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    record = autoscale_record(kubectl, namespace, app)
    assert (record["replicas"], record["decisions"]) == (1, 2)
    messages = wait_until(
        lambda: (found := autoscaled_events(kubectl, namespace, app)) and len(found) >= 2 and found,
        what="two Autoscaled events",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert [m.split(" (")[0] for m in messages] == [
        "scorer: 1 -> 2 replicas",
        "scorer: 2 -> 1 replicas",
    ]  # one step up, one step down: no flapping


def test_with_keda_the_operator_writes_a_scaled_object_and_leaves_the_replicas_to_it(
    keda_crd: str,
    start_operator: StartOperator,
    target: KubernetesTarget,
    kubectl: Kubectl,
    application: Application,
) -> None:
    app = autoscaled(application, keda=True)
    start_operator(autoscale_s=1)  # asks the cluster: the CRD is there
    namespace = target.namespace
    target.deploy(app, bootstrap=None)
    resource = wait_running(kubectl, namespace, app.name)
    child = names.child_name(app.name, "scorer")

    def scaled_objects() -> dict[str, Any]:
        listing = get_json(kubectl, "scaledobjects.keda.sh", "-n", namespace)
        return {item["metadata"]["name"]: item for item in listing["items"]}

    found = wait_until(
        lambda: scaled_objects().get(child),
        what="the scorer's ScaledObject",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert set(scaled_objects()) == {child}  # only the autoscaled streamlet
    owner = found["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("StreamflowApplication", resource["metadata"]["uid"])
    spec = found["spec"]
    assert spec["scaleTargetRef"]["name"] == child
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["cooldownPeriod"]) == (1, 8, 5)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["topic"] == scorer_input(app)
    assert trigger["metadata"]["consumerGroup"] == app.consumer_group("scorer")
    assert trigger["metadata"]["lagThreshold"] == "10"
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 5
    using = condition(kubectl, namespace, app, "Autoscaling")
    assert (using["status"], using["reason"]) == ("True", "KEDA")

    # KEDA's HPA scales the Deployment; the operator follows rather than undoes it.
    kubectl("scale", "deployment", child, "--replicas=3", "-n", namespace)
    wait_until(
        lambda: (
            autoscale_record(kubectl, namespace, app)
            == {
                "by": "keda",
                "replicas": 3,
                "reason": f"KEDA scales it through ScaledObject {child}",
            }
        ),
        what="the status to show KEDA's count",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    wait_running(kubectl, namespace, app.name)
    assert scorer_replicas(kubectl, namespace, app) == 3
    assert autoscaled_events(kubectl, namespace, app) == []

    # KEDA turned off: its ScaledObject goes, the operator takes over (lag 0: down to min).
    patch = [{"op": "replace", "path": "/spec/streamlets/scorer/autoscale/keda", "value": False}]
    kubectl(
        "patch", "sfapp", app.name, "-n", namespace, "--type=json", f"--patch={json.dumps(patch)}"
    )
    wait_until(
        lambda: child not in scaled_objects(),
        what="the ScaledObject to be deleted",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    wait_until(
        lambda: scorer_replicas(kubectl, namespace, app) == 1,
        what="the operator to scale the scorer down to min itself",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert autoscale_record(kubectl, namespace, app)["by"] == "operator"
