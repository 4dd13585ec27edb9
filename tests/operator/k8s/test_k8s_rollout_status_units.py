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
from streamflow.operator.kubernetes import recorded, spec, verify_job
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.rollout_entry import entry, merge_patch
from streamflow.operator.kubernetes.rollout_status import RolloutStatus
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


def verified_serving(
    cluster: FakeCluster, streamlet: str | None, *, control: str = "", decisions: str = ""
) -> None:
    """The verifier's record, as a reconcile leaves it, with ``streamlet`` serving models
    from ``control`` (by default the topic it consumes) and decisions on ``decisions`` (by
    default the topic it produces: the test app has no controller, so the scorer stands
    in for one)."""
    resource = spec.parse(cluster.body)
    app = resource.app
    facts: dict[str, Any] = {s: {"config": {}, "httpPort": None} for s in app.streamlets}
    if streamlet is not None:
        consumed = next(
            t for t, s in app.topics.items() if any(c.streamlet == streamlet for c in s.consumers)
        )
        produced = next(
            t for t, s in app.topics.items() if any(c.streamlet == streamlet for c in s.producers)
        )
        facts[streamlet].update(
            controlTopic=control or consumed, decisionTopics=[decisions or produced]
        )
    cluster.body.setdefault("status", {})["verified"] = {
        "key": verify_job.spec_key(resource), "facts": recorded.FACTS, "problems": [],
        "streamlets": facts,
    }  # fmt: skip


def topics_of(cluster: FakeCluster) -> tuple[str, str]:
    app = spec.parse(cluster.body).app
    samples = next(t for t in app.topics if t.startswith("samples"))
    scores = next(t for t in app.topics if t.startswith("scores"))
    return samples, scores


def watched(app: Application) -> tuple[FakeCluster, RolloutStatus, Reader, str]:
    cluster, reconciler = cluster_of(app, keda_installed=False)
    reader = Reader(RUNNING)
    return cluster, RolloutStatus(reconciler, read=reader), reader, cluster.body["metadata"]["name"]


def test_a_tick_writes_the_rollout_once_and_nothing_while_it_stands() -> None:
    cluster, status, reader, name = watched(make_application(bootstrap="kafka:9092"))
    verified_serving(cluster, "scorer")
    assert status.tick("prod", name) == {"scorer": RUNNING}
    assert cluster.body["status"]["rollouts"] == {"scorer": RUNNING}
    samples, scores = topics_of(cluster)
    assert reader.asked == [f"scorer {samples} ['{scores}']"]
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
    assert len(reader.asked) == 1  # not read again


def test_a_spec_being_verified_again_keeps_the_rollout_and_is_not_read() -> None:
    """A `configure` or a new image: the pods still run the rollout until the new spec
    is verified, so its status stays (it was wiped), and nothing is read meanwhile."""
    cluster, status, reader, name = watched(make_application(bootstrap="kafka:9092"))
    verified_serving(cluster, "scorer")
    status.tick("prod", name)
    cluster.body["status"]["verified"]["key"] = "another spec's"
    assert status.tick("prod", name) == {}
    assert cluster.body["status"]["rollouts"] == {"scorer": RUNNING}
    assert len(reader.asked) == 1


def test_an_earlier_operators_record_is_verified_again_to_learn_the_topics() -> None:
    cluster, _, _, _ = watched(make_application(bootstrap="kafka:9092"))
    verified_serving(cluster, "scorer")
    resource = spec.parse(cluster.body)
    key = verify_job.spec_key(resource)
    assert recorded.restore(cluster.body["status"], key) is not None
    del cluster.body["status"]["verified"]["facts"]  # written before the topics were facts
    assert recorded.restore(cluster.body["status"], key) is None


def test_topics_the_spec_does_not_wire_to_the_streamlet_are_never_read() -> None:
    """The facts come from the verifier, which runs the application's own image: a topic
    its serving streamlet does not consume, or decisions no follower of that topic
    writes, are not read (a busy data topic, another application's)."""
    cluster, status, reader, name = watched(make_application(bootstrap="kafka:9092"))
    samples, scores = topics_of(cluster)
    verified_serving(cluster, "scorer", control=scores)  # the scorer produces it
    status.tick("prod", name)
    verified_serving(cluster, "scorer", control="another-apps-topic")
    status.tick("prod", name)
    assert reader.asked == []
    verified_serving(cluster, "scorer", decisions=samples)  # written by the ingress
    status.tick("prod", name)
    assert reader.asked == [f"scorer {samples} []"]


def test_what_a_record_says_is_bounded_in_the_status() -> None:
    decision = {
        "candidate_version": 2, "sequence": 1, "verdict": "HOLD", "step": 1, "steps": 2,
        "mode": "canary", "share": float("nan"), "reason": "x" * 1_000_000, "windows": 1,
    }  # fmt: skip
    found = entry(Standing("wine", served(1)), decision)
    assert found is not None
    last = found["lastDecision"]
    assert len(last["reason"]) == 1024 and "share" not in last


def test_a_resource_admission_refuses_is_never_read() -> None:
    """An attacker's spec that would load a library into librdkafka: no client is built."""
    app = make_application(bootstrap="kafka:9092")
    hostile = KafkaSpec(bootstrap="kafka:9092", config={"plugin.library.paths": "/tmp/evil.so"})
    cluster, status, reader, name = watched(dataclasses.replace(app, kafka=hostile))
    verified_serving(cluster, "scorer")
    assert status.tick("prod", name) == {}
    assert reader.asked == []
    assert "rollouts" not in cluster.body["status"]
