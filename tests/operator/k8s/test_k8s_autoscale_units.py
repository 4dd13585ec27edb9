"""Autoscaling on Kubernetes without a cluster: the ScaledObject, who scales, what reconciles want.

The pure parts are pinned directly; how a reconcile and the autoscaler treat
an autoscaled streamlet's replicas is checked on an in-memory stand-in for
:class:`~streamflow.operator.kubernetes.executor.Cluster` (plain dicts, the
same calls), so a failure points at the rule rather than at the API server.
The real control plane runs the same paths in ``test_k8s_autoscale.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import pytest

from streamflow.blueprint.model import Application, AutoscaleSpec, KafkaSpec
from streamflow.operator.autoscale import Decision
from streamflow.operator.kubernetes import classes, keda, names, resources, scaling, spec
from streamflow.operator.kubernetes.autoscaler import Autoscaler
from streamflow.operator.kubernetes.reconcile import Reconciler
from streamflow.runtime.grouplag import GroupLag
from tests.operator.k8s.support import make_application

AUTO = AutoscaleSpec(min=1, max=4, target_lag=100, scale_up_after=0, scale_down_after=30)


def autoscaled(auto: AutoscaleSpec = AUTO, *, bootstrap: str | None = "kafka:9092") -> Application:
    """The test application, its scorer autoscaled (starting at min)."""
    app = make_application(bootstrap="kafka:9092")
    scorer = dataclasses.replace(app.streamlets["scorer"], autoscale=auto, replicas=auto.min)
    return dataclasses.replace(
        app,
        streamlets={**app.streamlets, "scorer": scorer},
        kafka=KafkaSpec(bootstrap=bootstrap),
    )


def resource_of(app: Application) -> spec.AppResource:
    body = spec.body(app, namespace="prod")
    body["metadata"].update(uid="u-1", generation=3)
    return spec.parse(body)


def input_topic(app: Application) -> str:
    return next(
        t.name for t in app.topics.values() if any(c.streamlet == "scorer" for c in t.consumers)
    )


# -- the ScaledObject --------------------------------------------------------------------------


def test_the_scaled_object_carries_autoscale_over_to_keda() -> None:
    auto = AutoscaleSpec(min=2, max=6, target_lag=5000, scale_up_after=15, scale_down_after=7200)
    app = autoscaled(dataclasses.replace(auto, keda=True))
    resource = resource_of(app)
    body = keda.scaled_object(resource, "scorer", topics=["a", "b"])
    child = names.child_name(resource.name, "scorer")
    assert body["apiVersion"] == "keda.sh/v1alpha1" and body["kind"] == "ScaledObject"
    assert body["metadata"]["name"] == child and body["metadata"]["namespace"] == "prod"
    assert body["metadata"]["ownerReferences"] == [resource.owner_reference()]
    assert body["metadata"]["labels"] == resources.labels(resource, "scorer")
    so = body["spec"]
    assert so["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": child}
    assert (so["minReplicaCount"], so["maxReplicaCount"]) == (2, 6)
    behavior = so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"] == {"stabilizationWindowSeconds": 15}
    assert behavior["scaleDown"] == {"stabilizationWindowSeconds": 3600}  # the HPA's ceiling
    assert so["cooldownPeriod"] == 3600
    assert [t["metadata"]["topic"] for t in so["triggers"]] == ["a", "b"]  # one per topic
    for trigger in so["triggers"]:
        assert trigger["type"] == "kafka"
        meta = trigger["metadata"]
        assert meta["bootstrapServers"] == "kafka:9092"
        assert meta["consumerGroup"] == app.consumer_group("scorer")
        assert meta["lagThreshold"] == "5000"  # KEDA's metadata values are strings
        assert meta["offsetResetPolicy"] == "earliest"
    assert keda.same({**copy.deepcopy(body), "status": {"x": 1}}, body)
    moved = copy.deepcopy(body)
    moved["spec"]["maxReplicaCount"] = 9
    assert not keda.same(moved, body)


def test_keda_is_asked_about_at_most_once_a_ttl() -> None:
    now = [0.0]
    asked: list[float] = []
    probe = keda.Probe(lambda: bool(asked.append(now[0])) or True, ttl=30, clock=lambda: now[0])
    assert probe() and probe()
    now[0] = 31
    assert probe()
    assert asked == [0.0, 31]


# -- who scales, and how many ------------------------------------------------------------------


def test_who_scales_and_the_autoscaling_condition() -> None:
    operator = autoscaled()
    with_keda = autoscaled(dataclasses.replace(AUTO, keda=True))
    assert scaling.who_scales(operator, keda_installed=True) == {"scorer": "operator"}
    assert scaling.who_scales(with_keda, keda_installed=True) == {"scorer": "keda"}
    assert scaling.who_scales(with_keda, keda_installed=False) == {"scorer": "operator"}
    plain = make_application(bootstrap="kafka:9092")
    assert scaling.condition(plain, scaling.who_scales(plain, keda_installed=True)) is None
    ours = scaling.condition(operator, {"scorer": "operator"})
    assert ours is not None and (ours.status, ours.reason) == (True, "Operator")
    theirs = scaling.condition(with_keda, {"scorer": "keda"})
    assert theirs is not None and (theirs.status, theirs.reason) == (True, "KEDA")
    missing = scaling.condition(with_keda, {"scorer": "operator"})
    assert missing is not None and (missing.status, missing.reason) == (False, "KedaMissing")
    assert "KEDA is not installed" in missing.message and "scorer" in missing.message


def test_an_autoscaled_streamlet_wants_the_last_decision_not_the_spec() -> None:
    app = autoscaled()

    def want(scaler: str | None, entry: dict[str, Any] | None, observed: int | None) -> int:
        return scaling.desired_replicas(
            app, "scorer", scaler=scaler, entry=entry, observed=observed
        )

    decided = {"by": "operator", "replicas": 3}
    assert want("operator", decided, 1) == 3
    assert want("operator", None, 2) == 2  # no decision yet: leave it be
    assert want("operator", None, None) == 1  # a new Deployment starts at min
    assert want("operator", {"by": "operator", "replicas": 9}, 1) == 4  # new bounds apply
    assert want("operator", {"by": "keda", "replicas": 3}, 2) == 2  # KEDA's, now stale
    assert want("keda", decided, 5) == 5
    assert want("keda", None, None) == 1
    assert (
        scaling.desired_replicas(
            make_application(bootstrap="k:1"), "scorer", scaler=None, entry=decided, observed=1
        )
        == 2
    )  # not autoscaled: the spec's


def test_lag_is_measured_on_data_inlets_only() -> None:
    app = autoscaled()
    assert scaling.input_topics(app, "scorer") == [input_topic(app)]
    assert scaling.input_topics(app, "ingress") == []
    data = app.to_dict()
    data["streamlets"]["scorer"]["class"] = "nowhere:Missing"
    data["topics"]["models"] = {
        "consumers": ["scorer.model"],
        "config": {"cleanup.policy": "compact"},
    }
    unknown = Application.from_dict(data)
    assert scaling.input_topics(unknown, "scorer") == [input_topic(app)]  # compacted: control


def test_a_decision_is_recorded_and_read_back_for_the_cli() -> None:
    decision = Decision(3, 5, "scaled up: lag 500", 500, 12.5, 0.0, changed=True)
    entry = scaling.decision_entry(decision, None, now="2026-01-02T03:04:05Z")
    assert entry == {
        "by": "operator",
        "replicas": 3,
        "wanted": 5,
        "reason": "scaled up: lag 500",
        "lag": 500,
        "rateIn": 12.5,
        "decisions": 1,
        "decidedAt": "2026-01-02T03:04:05Z",
    }
    steady = dataclasses.replace(decision, changed=False, reason="steady: lag 0", lag=0)
    again = scaling.decision_entry(steady, entry, now="2026-01-02T03:09:00Z")
    assert (again["decisions"], again["decidedAt"]) == (1, "2026-01-02T03:04:05Z")
    shown = scaling.autoscale_status(AUTO, again, replicas=1)
    assert (shown.replicas, shown.reason, shown.decisions, shown.lag) == (3, "steady: lag 0", 1, 0)
    assert shown.decided_at is not None and shown.rate == 12.5
    assert (shown.min, shown.max, shown.target_lag) == (1, 4, 100)
    first = scaling.autoscale_status(AUTO, None, replicas=2)
    assert first.replicas == 2 and first.decided_at is None and "no decision yet" in first.reason


def test_a_roll_keeps_the_replicas_the_planner_asks_for() -> None:
    resource = resource_of(autoscaled())
    facts = classes.Facts(config={"threshold": 6.0})
    assert resources.deployment(resource, "scorer", facts)["spec"]["replicas"] == 1
    assert resources.deployment(resource, "scorer", facts, replicas=3)["spec"]["replicas"] == 3


# -- a reconcile and the autoscaler, on an in-memory cluster -----------------------------------


class FakeCluster:
    """The calls the reconciler and the autoscaler make, on dicts."""

    def __init__(self, body: dict[str, Any], *, keda: bool) -> None:
        self.body = body
        self.keda = keda
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: list[str] = []

    def get_app(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.body)

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.writes.append("status")
        self.body["status"] = _merge(self.body.get("status") or {}, patch)

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def _of(self, kind: str) -> dict[str, dict[str, Any]]:
        return {
            o["metadata"]["annotations"][names.STREAMLET_ANNOTATION]: copy.deepcopy(o)
            for (k, _), o in self.objects.items()
            if k == kind
        }

    def deployments(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        return self._of("Deployment")

    def config_maps(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        return self._of("ConfigMap")

    def services(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        return self._of("Service")

    def put(self, body: Mapping[str, Any]) -> None:
        self.writes.append(f"put {body['kind']} {body['metadata']['name']}")
        self.objects[(body["kind"], body["metadata"]["name"])] = copy.deepcopy(dict(body))

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        self.writes.append(f"scale {name} {replicas}")
        self.objects[("Deployment", name)]["spec"]["replicas"] = replicas

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, name), None)

    def serves(self, group: str, version: str, plural: str) -> bool:
        return self.keda

    def scaled_objects(self, namespace: str, app: str) -> dict[str, dict[str, Any]]:
        return self._of(keda.KIND)

    def put_scaled_object(self, body: Mapping[str, Any]) -> None:
        self.put(body)

    def delete_scaled_object(self, namespace: str, name: str) -> None:
        self.writes.append(f"delete ScaledObject {name}")
        self.objects.pop((keda.KIND, name), None)


def _merge(into: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(into)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    def info(self, resource: Mapping[str, Any], *, reason: str, message: str) -> None:
        self.posted.append((reason, message))

    def warn(self, resource: Mapping[str, Any], *, reason: str, message: str) -> None:
        self.posted.append((reason, message))


def cluster_of(app: Application, *, keda_installed: bool) -> tuple[FakeCluster, Reconciler]:
    body = spec.body(app, namespace="prod")
    body["metadata"].update(uid="u-1", generation=1)
    cluster = FakeCluster(body, keda=keda_installed)
    # about scaling, not images: its body names none, and the operator admits any
    reconciler = Reconciler(cluster, Events(), allowed_images=("*",))  # type: ignore[arg-type]
    return cluster, reconciler


def scorer_replicas(cluster: FakeCluster, app: Application) -> int:
    name = names.child_name(names.resource_name(app.name), "scorer")
    return int(cluster.objects[("Deployment", name)]["spec"]["replicas"])


def test_the_reconcile_applies_the_recorded_decision_and_keeps_it() -> None:
    app = autoscaled(bootstrap=None)
    cluster, reconciler = cluster_of(app, keda_installed=False)
    reconciler.reconcile("prod", cluster.body["metadata"]["name"])
    assert scorer_replicas(cluster, app) == 1  # starts at min
    cluster.body["status"]["autoscale"] = {"scorer": {"by": "operator", "replicas": 3}}
    outcome = reconciler.reconcile("prod", cluster.body["metadata"]["name"])
    assert outcome is not None and [a.describe() for a in outcome.actions] == [
        "scale scorer from 1 to 3"
    ]
    assert outcome.status["streamlets"]["scorer"]["desired"] == 3
    assert outcome.status["autoscale"]["scorer"]["replicas"] == 3  # kept, not wiped
    condition = next(c for c in outcome.status["conditions"] if c["type"] == "Autoscaling")
    assert condition["reason"] == "Operator"
    cluster.body["spec"]["streamlets"]["scorer"]["config"]["threshold"] = 7.0
    rolled = reconciler.reconcile("prod", cluster.body["metadata"]["name"])
    assert rolled is not None and [type(a).__name__ for a in rolled.actions] == ["Roll"]
    assert scorer_replicas(cluster, app) == 3  # a roll keeps the autoscaler's count


def test_keda_gets_a_scaled_object_and_the_replicas_are_left_to_it() -> None:
    app = autoscaled(dataclasses.replace(AUTO, keda=True), bootstrap=None)
    cluster, reconciler = cluster_of(app, keda_installed=True)
    name = cluster.body["metadata"]["name"]
    reconciler.reconcile("prod", name)
    child = names.child_name(name, "scorer")
    assert (keda.KIND, child) in cluster.objects
    cluster.objects[("Deployment", child)]["spec"]["replicas"] = 4  # KEDA's HPA scaled it
    outcome = reconciler.reconcile("prod", name)
    assert outcome is not None and outcome.actions == [] and scorer_replicas(cluster, app) == 4
    assert cluster.body["status"]["autoscale"]["scorer"]["by"] == "keda"
    assert cluster.body["status"]["autoscale"]["scorer"]["replicas"] == 4
    cluster.body["spec"]["streamlets"]["scorer"]["autoscale"]["keda"] = False
    reconciler.reconcile("prod", name)
    assert (keda.KIND, child) not in cluster.objects  # turned off: KEDA lets go
    assert "autoscale" not in cluster.body["status"]  # KEDA's record goes with it
    assert scorer_replicas(cluster, app) == 4  # the operator takes over from there


def test_without_keda_the_operator_scales_and_says_so() -> None:
    app = autoscaled(dataclasses.replace(AUTO, keda=True), bootstrap=None)
    cluster, reconciler = cluster_of(app, keda_installed=False)
    name = cluster.body["metadata"]["name"]
    reconciler.reconcile("prod", name)
    reconciler.reconcile("prod", name)
    assert not any(kind == keda.KIND for kind, _ in cluster.objects)
    condition = next(c for c in cluster.body["status"]["conditions"] if c["type"] == "Autoscaling")
    assert (condition["status"], condition["reason"]) == ("False", "KedaMissing")
    events = reconciler.events.posted  # type: ignore[attr-defined]
    assert [r for r, _ in events].count("KedaMissing") == 1  # once, not at every reconcile


def test_the_autoscaler_decides_records_and_the_reconcile_scales() -> None:
    lags = [1000, 1000, 0, 0, 0]  # a sample every 20 s
    app = autoscaled(bootstrap=None)
    cluster, reconciler = cluster_of(app, keda_installed=False)
    name = cluster.body["metadata"]["name"]
    reconciler.reconcile("prod", name)
    now = [0.0]
    readings = iter(lags)

    def read_lag(resource: spec.AppResource, streamlet: str, topics: list[str]) -> GroupLag:
        assert topics == [input_topic(app)]
        return GroupLag(lag=next(readings), produced=1000, consumed=0, partitions=2)

    autoscaler = Autoscaler(reconciler, read_lag=read_lag, clock=lambda: now[0])
    seen = []
    for _ in lags:
        autoscaler.tick("prod", name)
        seen.append(scorer_replicas(cluster, app))
        now[0] += 20
    assert seen == [2, 2, 2, 1, 1]  # up to the partitions at once; down after 30 s of no lag
    record = cluster.body["status"]["autoscale"]["scorer"]
    assert (record["replicas"], record["decisions"]) == (1, 2)
    assert record["reason"].startswith("steady")  # the latest word, the count's last change kept
    posted = reconciler.events.posted  # type: ignore[attr-defined]
    messages = [message for reason, message in posted if reason == "Autoscaled"]
    assert [m.split(" (")[0] for m in messages] == [
        "scorer: 1 -> 2 replicas",
        "scorer: 2 -> 1 replicas",
    ]
    assert "scaled up" in messages[0] and "scaled down" in messages[1]


# -- what the autoscaler may not do ------------------------------------------------------------


class AdminFactory:
    """Stands in for AdminClient: records the configs, then fails as an unreachable broker."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []

    def __call__(self, config: dict[str, Any]) -> Any:
        self.configs.append(config)
        raise ValueError("no broker in a unit test")


def with_kafka(app: Application, **kafka: Any) -> Application:
    return dataclasses.replace(app, kafka=KafkaSpec(**{"bootstrap": "kafka:9092", **kafka}))


@pytest.mark.parametrize(
    ("kafka", "reason"),
    [
        ({"config": {"plugin.library.paths": "/some/lib"}}, "ForbiddenKafkaConfig"),
        ({"secret": "creds"}, "SecretNotAllowed"),  # the fake cluster has no such Secret
    ],
)
def test_no_kafka_client_is_built_for_a_refused_resource(
    kafka: dict[str, Any], reason: str
) -> None:
    app = with_kafka(autoscaled(), **kafka)
    cluster, reconciler = cluster_of(app, keda_installed=False)
    name = cluster.body["metadata"]["name"]
    reconciler.reconcile("prod", name)
    assert cluster.body["status"]["conditions"][0]["reason"] == reason
    factory = AdminFactory()
    autoscaler = Autoscaler(reconciler, admin_factory=factory, clock=lambda: 0.0)
    assert autoscaler.tick("prod", name) == []
    assert factory.configs == []  # librdkafka never saw the resource's settings
    assert "autoscale" not in cluster.body["status"]


def test_an_admitted_resource_gets_its_client_from_admission() -> None:
    app = with_kafka(autoscaled(), config={"linger.ms": "5"})
    cluster, reconciler = cluster_of(app, keda_installed=False)
    factory = AdminFactory()
    Autoscaler(reconciler, admin_factory=factory).tick("prod", cluster.body["metadata"]["name"])
    assert len(factory.configs) == 1
    config = factory.configs[0]
    assert (config["bootstrap.servers"], config["linger.ms"]) == ("kafka:9092", "5")


@pytest.mark.parametrize(
    ("auto", "words"),
    [
        (AutoscaleSpec(min=3, max=2), "min (3) is above max (2)"),
        (AutoscaleSpec(min=0, max=0), "max (0) must be 1 or more"),
        (AutoscaleSpec(target_lag=0), "targetLag (0) must be 1 or more"),
        (AutoscaleSpec(scale_down_after=-1), "scaleDownAfter (-1.0) must be 0 or more"),
    ],
)
def test_bounds_the_policy_cannot_keep_fail_the_spec_and_nothing_flaps(
    auto: AutoscaleSpec, words: str
) -> None:
    app = autoscaled(auto, bootstrap=None)
    with pytest.raises(spec.SpecError, match=re.escape("spec.streamlets.scorer.autoscale")):
        resource_of(app)
    cluster, reconciler = cluster_of(app, keda_installed=False)
    name = cluster.body["metadata"]["name"]
    outcome = reconciler.reconcile("prod", name)
    assert outcome is not None and outcome.status["phase"] == "Failed"
    assert words in outcome.status["message"]
    assert outcome.status["conditions"][0]["reason"] == "InvalidSpec"

    def read_lag(resource: spec.AppResource, streamlet: str, topics: list[str]) -> GroupLag:
        raise AssertionError("an invalid spec is not measured")

    writes = len(cluster.writes)
    for _ in range(3):
        assert Autoscaler(reconciler, read_lag=read_lag).tick("prod", name) == []
        reconciler.reconcile("prod", name)
    assert len(cluster.writes) == writes  # no Event, patch or reconcile loop


def test_a_streamlet_removed_while_measuring_is_skipped() -> None:
    app = autoscaled(bootstrap=None)
    cluster, reconciler = cluster_of(app, keda_installed=False)
    name = cluster.body["metadata"]["name"]
    reconciler.reconcile("prod", name)

    def read_lag(resource: spec.AppResource, streamlet: str, topics: list[str]) -> GroupLag:
        body = cluster.body["spec"]  # a new spec lands between the sample and the decision
        del body["streamlets"]["scorer"]
        for topic in body["topics"].values():
            for side in ("producers", "consumers"):
                topic[side] = [r for r in topic[side] if not r.startswith("scorer.")]
        return GroupLag(lag=1000, produced=1000, consumed=0, partitions=2)

    assert Autoscaler(reconciler, read_lag=read_lag).tick("prod", name) == []
    assert "scorer" not in (cluster.body["status"].get("autoscale") or {})


def test_the_policys_memory_starts_over_when_autoscale_changes() -> None:
    app = autoscaled(bootstrap=None)  # scale_down_after 30 s, as in the test above
    cluster, reconciler = cluster_of(app, keda_installed=False)
    name = cluster.body["metadata"]["name"]
    reconciler.reconcile("prod", name)
    now = [0.0]
    readings = iter([1000, 1000, 0, 0, 0])

    def read_lag(resource: spec.AppResource, streamlet: str, topics: list[str]) -> GroupLag:
        return GroupLag(lag=next(readings), produced=1000, consumed=0, partitions=2)

    autoscaler = Autoscaler(reconciler, read_lag=read_lag, clock=lambda: now[0])
    seen = []
    for tick in range(5):
        if tick == 2:  # new bounds: what the old windows wanted no longer counts
            cluster.body["spec"]["streamlets"]["scorer"]["autoscale"]["max"] = 3
        autoscaler.tick("prod", name)
        seen.append(scorer_replicas(cluster, app))
        now[0] += 20
    # unchanged, it scales down at the 4th tick; anew from the 3rd, it waits 30 s more
    assert seen == [2, 2, 2, 2, 1]
