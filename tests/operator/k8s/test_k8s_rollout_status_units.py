"""``status.rollouts`` without a cluster or a broker: what is written, when, and what is not read.

The reader of the topics is a stand-in here; the real control plane and broker run the
same tick in ``test_k8s_rollout_status.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streamflow.blueprint.model import Application, KafkaSpec
from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.kinds import ModelKind
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.rollout_standing import Standing
from streamflow.operator.kubernetes import spec, verify_job
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.rollout_status import RolloutStatus, entry, merge_patch
from streamflow.operator.kubernetes.spec import AppResource
from tests.operator.k8s.support import make_application
from tests.operator.k8s.test_k8s_autoscale_units import FakeCluster, cluster_of

RUNNING = {"model": "wine", "stable": 1, "candidate": 2, "mode": "canary", "share": 25.0}


def served(version: int, rollout: Rollout | None = None) -> ModelDescriptor:
    kind = ModelKind.OPEN_INFERENCE_V2
    return ModelDescriptor("wine", version, kind, location="http://m", rollout=rollout)


def test_the_entry_says_the_versions_and_the_split() -> None:
    assert entry(Standing("wine"), None) is None  # nothing pushed yet
    assert entry(Standing("wine", served(1)), None) == {"model": "wine", "stable": 1}
    shadow = Standing("wine", served(1), served(2, Rollout(RolloutMode.SHADOW)))
    assert entry(shadow, None) == {"model": "wine", "stable": 1, "candidate": 2, "mode": "shadow"}
    ab = Standing("wine", served(1), served(2, Rollout(RolloutMode.AB, 50.0, ("blue", "green"))))
    assert entry(ab, None) == {
        "model": "wine", "stable": 1, "candidate": 2, "mode": "ab", "share": 50.0,
        "arms": ["blue", "green"],
    }  # fmt: skip


def test_a_merge_patch_removes_what_the_new_entry_lacks() -> None:
    before = {**RUNNING, "lastDecision": {"verdict": "HOLD", "decidedAt": "x"}}
    after = {"model": "wine", "stable": 2, "lastDecision": {"verdict": "PROMOTE"}}
    assert merge_patch(before, after) == {
        "candidate": None, "mode": None, "share": None, "model": "wine", "stable": 2,
        "lastDecision": {"decidedAt": None, "verdict": "PROMOTE"},
    }  # fmt: skip
    assert merge_patch(None, after) == after


class Reader:
    """What the topics say, per streamlet; records what it was asked to read."""

    def __init__(self, answer: dict[str, Any] | None) -> None:
        self.answer = answer
        self.failure: Exception | None = None
        self.asked: list[str] = []

    def __call__(
        self, resource: AppResource, streamlet: str, facts: Facts
    ) -> dict[str, Any] | None:
        self.asked.append(f"{streamlet} {facts.control_topic} {list(facts.decision_topics)}")
        if self.failure is not None:
            raise self.failure
        return self.answer


def verified_serving(cluster: FakeCluster, streamlet: str | None) -> None:
    """The verifier's record, as a reconcile leaves it, with ``streamlet`` serving models."""
    resource = spec.parse(cluster.body)
    facts: dict[str, Any] = {s: {"config": {}, "httpPort": None} for s in resource.app.streamlets}
    if streamlet is not None:
        facts[streamlet].update(controlTopic="models", decisionTopics=["decisions"])
    cluster.body.setdefault("status", {})["verified"] = {
        "key": verify_job.spec_key(resource), "problems": [], "streamlets": facts,
    }  # fmt: skip


def watched(app: Application) -> tuple[FakeCluster, RolloutStatus, Reader, str]:
    cluster, reconciler = cluster_of(app, keda_installed=False)
    reader = Reader(RUNNING)
    return cluster, RolloutStatus(reconciler, read=reader), reader, cluster.body["metadata"]["name"]


def test_a_tick_writes_the_rollout_once_and_nothing_while_it_stands() -> None:
    cluster, status, reader, name = watched(make_application(bootstrap="kafka:9092"))
    verified_serving(cluster, "scorer")
    assert status.tick("prod", name) == {"scorer": RUNNING}
    assert cluster.body["status"]["rollouts"] == {"scorer": RUNNING}
    assert reader.asked == ["scorer models ['decisions']"]
    writes = len(cluster.writes)
    assert status.tick("prod", name) == {}  # the same: no write
    assert len(cluster.writes) == writes

    reader.failure = KafkaException(KafkaError(KafkaError._TRANSPORT))
    assert status.tick("prod", name) == {}  # logged; the status keeps what it said
    assert cluster.body["status"]["rollouts"] == {"scorer": RUNNING}

    reader.failure, reader.answer = None, None  # the control topic says nothing any more
    status.tick("prod", name)
    assert cluster.body["status"]["rollouts"] == {}


def test_a_streamlet_that_serves_no_more_leaves_the_status() -> None:
    cluster, status, reader, name = watched(make_application(bootstrap="kafka:9092"))
    verified_serving(cluster, "scorer")
    status.tick("prod", name)
    verified_serving(cluster, None)  # a new spec verified: nothing serves models
    assert status.tick("prod", name) == {"scorer": None}
    assert cluster.body["status"]["rollouts"] == {}
    assert reader.asked == ["scorer models ['decisions']"]  # not read again


def test_a_spec_not_verified_as_it_is_now_is_not_read() -> None:
    cluster, status, reader, name = watched(make_application(bootstrap="kafka:9092"))
    verified_serving(cluster, "scorer")
    cluster.body["status"]["verified"]["key"] = "another spec's"
    assert status.tick("prod", name) == {}
    assert reader.asked == []


def test_a_resource_admission_refuses_is_never_read() -> None:
    """An attacker's spec that would load a library into librdkafka: no client is built."""
    app = make_application(bootstrap="kafka:9092")
    hostile = KafkaSpec(bootstrap="kafka:9092", config={"plugin.library.paths": "/tmp/evil.so"})
    cluster, status, reader, name = watched(dataclasses.replace(app, kafka=hostile))
    verified_serving(cluster, "scorer")
    assert status.tick("prod", name) == {}
    assert reader.asked == []
    assert "rollouts" not in cluster.body["status"]
