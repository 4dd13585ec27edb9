"""The operator's pure parts, without a cluster: names, manifests, resource bodies, status.

What the operator writes is decided by pure functions, so the subtle rules
(which change rolls which streamlet, what never reaches a pod, how the phase
follows the Deployments) are pinned here, where a failure points at the rule.
"""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamflow.blueprint.model import Application, KafkaSpec
from streamflow.operator.kubernetes import classes, kafka, manifests, names, resources, spec, status
from streamflow.schema.bounds import DecodeLimits
from tests.operator.k8s.support import make_application

OPERATOR_DIR = Path(__file__).parents[3] / "operator"
STREAMFLOW = Path(sys.executable).with_name("streamflow")


@pytest.fixture(scope="module")
def app() -> Application:
    return make_application(bootstrap="kafka:9092")


def resource_of(app: Application, pods: spec.PodSettings | None = None) -> spec.AppResource:
    body = spec.body(app, namespace="prod", pods=pods)
    body["metadata"].update(uid="u-1", generation=3)
    return spec.parse(body)


# -- names -------------------------------------------------------------------------------------


def test_names_stay_valid_and_distinct_whatever_goes_in() -> None:
    assert names.child_name("wine", "scorer") == "wine-scorer"
    long = names.child_name("a" * 40, "scorer-with-a-long-name")
    assert len(long) <= 47 and long[0].isalpha() and long[-1].isalnum()
    assert long != names.child_name("a" * 40, "scorer-with-a-long-nam")
    assert names.child_name("9lives", "x").startswith("s-")
    assert names.label_value("ok.value_1") == "ok.value_1"
    odd = names.label_value("Has Spaces/and:colons" * 5)
    assert len(odd) <= 63 and " " not in odd and "/" not in odd


# -- the files that install the operator -------------------------------------------------------


def test_the_checked_in_manifests_are_generated_from_the_code() -> None:
    for name, text in manifests.files().items():
        stale = (
            f"operator/{name} is stale: run `streamflow operator manifests --output-dir operator`"
        )
        assert (OPERATOR_DIR / name).read_text() == text, stale


def test_operator_manifests_prints_the_crd_rbac_and_deployment() -> None:
    result = subprocess.run(
        [str(STREAMFLOW), "operator", "manifests", "--image=registry.example/sf:1", "-n", "apps"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    kinds = [line for line in result.stdout.splitlines() if line.startswith("kind: ")]
    assert kinds == [
        "kind: CustomResourceDefinition",
        "kind: ServiceAccount",
        "kind: Role",
        "kind: RoleBinding",
        "kind: Deployment",  # no Service: the web view stays on the pod's loopback
    ]
    assert "image: registry.example/sf:1" in result.stdout
    assert "namespace: apps" in result.stdout
    assert "ClusterRole" not in result.stdout  # namespaced: least privilege


def test_the_operators_deployment_tells_it_its_own_image_and_admits_no_other_registry() -> None:
    """The default allowlist is the registry of this image: the Deployment passes it, no more."""
    for image in ("registry.example/sf:1", manifests.DEFAULT_IMAGE):
        deployment = manifests.operator_deployment(image=image)
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert container["image"] == env["STREAMFLOW_OPERATOR_IMAGE"] == image
        assert "STREAMFLOW_ALLOWED_IMAGES" not in env
        assert not any(arg.startswith("--allowed-images") for arg in container["args"])


# -- resource bodies ---------------------------------------------------------------------------


def test_a_config_change_changes_the_checksum_of_that_streamlet_only(app: Application) -> None:
    before = resource_of(app)
    after = resource_of(app.with_config("scorer", {"threshold": 7.5}))
    scaled = resource_of(app.with_replicas("logger", 5))
    for streamlet in app.streamlets:
        same = resources.checksum(before, streamlet) == resources.checksum(after, streamlet)
        assert same == (streamlet != "scorer"), streamlet
        assert resources.checksum(before, streamlet) == resources.checksum(scaled, streamlet)
    new_image = resource_of(app, spec.PodSettings(image="streamflow:0.2.0"))
    assert all(
        resources.checksum(before, s) != resources.checksum(new_image, s) for s in app.streamlets
    )


def test_kafka_credentials_reach_the_pod_only_from_the_secret(app: Application) -> None:
    secured = dataclasses.replace(
        app, kafka=KafkaSpec(bootstrap="kafka:9093", secret="kafka-creds")
    )
    resource = resource_of(secured)
    facts = classes.Facts(config={"threshold": 6.0})
    body = resources.deployment(resource, "scorer", facts)
    (container,) = body["spec"]["template"]["spec"]["containers"]
    assert container["envFrom"] == [
        {"prefix": "STREAMFLOW_KAFKA_", "secretRef": {"name": "kafka-creds"}}
    ]
    assert all("value" not in e or "KAFKA" not in e["name"] for e in container["env"])
    assert kafka.property_name("SASL_PASSWORD") == "sasl.password"
    assert kafka.property_name("BOOTSTRAP") == "bootstrap.servers"
    data = {"SASL_USERNAME": base64.b64encode(b"me").decode(), "BROKEN": "%%%"}
    assert kafka.secret_config(data) == {"sasl.username": "me"}
    # the registry's credentials, documented in the same Secret, are not a Kafka property
    data["SCHEMA_REGISTRY_USER_INFO"] = base64.b64encode(b"bob:pw").decode()
    assert kafka.secret_config(data) == {"sasl.username": "me"}


def test_only_an_http_ingress_gets_a_service_port(app: Application) -> None:
    resource = resource_of(app)
    ingress = classes.facts(app, "ingress")
    scorer = classes.facts(app, "scorer")
    assert (ingress.http_port, scorer.http_port) == (8000, None)
    assert scorer.config == {"threshold": 6.0} and not scorer.problems
    service = resources.service(resource, "ingress", 8000)
    assert service["spec"]["selector"] == {
        "streamflow.io/app": resource.name,
        "streamflow.io/streamlet": "ingress",
    }
    ports = resources.deployment(resource, "ingress", ingress)["spec"]["template"]["spec"]
    assert [p["name"] for p in ports["containers"][0]["ports"]] == ["health", "http"]
    # the ingress binds loopback unless told otherwise: its pod must listen on the pod's IP
    bind = {"name": "STREAMFLOW_HTTP_HOST", "value": "0.0.0.0"}
    assert bind in ports["containers"][0]["env"]
    scorer_pod = resources.deployment(resource, "scorer", scorer)["spec"]["template"]["spec"]
    assert bind not in scorer_pod["containers"][0]["env"]


def test_a_class_that_cannot_be_imported_is_not_fatal() -> None:
    data = make_application(bootstrap="kafka:9092").to_dict()
    data["streamlets"]["scorer"]["class"] = "nowhere:Missing"
    facts = classes.facts(Application.from_dict(data), "scorer")
    assert facts.unknown_class is not None and "scorer" in facts.unknown_class
    assert facts.http_port is None and facts.config == {"threshold": 6.0}


def test_a_spec_whose_topics_name_unknown_streamlets_is_refused(app: Application) -> None:
    body = spec.body(app, namespace="prod")
    next(iter(body["spec"]["topics"].values()))["consumers"] = ["ghost.in"]
    with pytest.raises(spec.SpecError, match=r"ghost\.in names no streamlet"):
        spec.parse(body)
    assert "dlq" not in body["spec"]["streamlets"]["scorer"]  # None values are left out


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("replicas", float("inf"), r"OverflowError: streamlets\.scorer: cannot convert"),
        ("decodeLimits", ["x"], r"TypeError: streamlets\.scorer: decodeLimits must be a mapping"),
        ("stallAfter", "soon", r"ValueError: streamlets\.scorer: could not convert"),
    ],
)
def test_a_malformed_field_is_a_spec_error_that_names_it_as_the_spec_spells_it(
    app: Application, field: str, value: object, problem: str
) -> None:
    body = spec.body(app, namespace="prod")
    body["spec"]["streamlets"]["scorer"][field] = value
    with pytest.raises(spec.SpecError, match=problem):
        spec.parse(body)


# -- status ------------------------------------------------------------------------------------


def deployment(replicas: int, ready: int, *, stuck: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                   "message": "exceeded its progress deadline"}] if stuck else []  # fmt: skip
    return {
        "metadata": {"generation": 2},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": 2,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": conditions,
        },
    }


def build(deployments: dict[str, Any], *, failure: str | None = None) -> dict[str, Any]:
    return status.build(
        generation=4,
        desired={"a": 2, "b": 1},
        deployments=deployments,
        conditions=[],
        previous=None,
        now="2026-01-01T00:00:00Z",
        failure=failure,
    )


def test_the_phase_follows_the_deployments() -> None:
    running = build({"a": deployment(2, 2), "b": deployment(1, 1)})
    assert (running["phase"], running["ready"], running["observedGeneration"]) == (
        "Running",
        "2/2",
        4,
    )
    pending = build({"a": deployment(2, 1), "b": deployment(1, 1)})
    assert (pending["phase"], pending["ready"]) == ("Pending", "1/2")
    assert "a (1/2 ready)" in pending["message"]
    assert build({"a": deployment(2, 2)})["phase"] == "Pending"  # b not created yet
    degraded = build({"a": deployment(2, 1, stuck=True), "b": deployment(1, 1)})
    assert degraded["phase"] == "Degraded" and "progress deadline" in degraded["message"]
    assert build({}, failure="bad spec")["phase"] == "Failed"


def test_a_condition_keeps_its_transition_time_while_it_holds() -> None:
    first = status.merge_conditions(None, [status.Condition("Ready", True, "Ok")], now="t1")
    again = status.merge_conditions(
        {"conditions": first}, [status.Condition("Ready", True, "Ok")], now="t2"
    )
    flipped = status.merge_conditions(
        {"conditions": again}, [status.Condition("Ready", False, "Down")], now="t3"
    )
    assert [c["lastTransitionTime"] for c in (*again, *flipped)] == ["t1", "t3"]


def test_a_replica_s_endpoint_is_its_pod_ip_and_health_port() -> None:
    from streamflow.operator.kubernetes import pods

    def pod(ip: str | None) -> dict[str, object]:
        status = {"phase": "Running", **({"podIP": ip} if ip else {})}
        return {"metadata": {"name": "app-scorer-0"}, "status": status}

    found = pods.streamlet_status("scorer", 3, [pod("10.1.2.3"), pod("fd00::7"), pod(None)])
    endpoints = [r.endpoint for r in found.replicas]
    assert endpoints == ["http://10.1.2.3:8080", "http://[fd00::7]:8080", None]


def test_stall_after_travels_as_stall_after_in_the_spec_and_reaches_the_pod(
    app: Application,
) -> None:
    name = next(iter(app.streamlets))
    tuned = dataclasses.replace(
        app,
        streamlets={
            **app.streamlets,
            name: dataclasses.replace(app.streamlets[name], stall_after=90.0),
        },
    )
    written = spec.to_spec(tuned, spec.PodSettings(image="reg.example/w:1"))
    assert written["streamlets"][name]["stallAfter"] == 90.0
    assert "stall_after" not in str(written)
    assert spec.spec_name(("streamlets", name), "stall_after") == "stallAfter"
    body = spec.body(tuned, namespace="ns", pods=spec.PodSettings(image="reg.example/w:1"))
    parsed = spec.parse(body)
    assert parsed.app.streamlets[name].stall_after == 90.0
    assert spec.pod_app_spec(parsed, name)["streamlets"][name]["stall_after"] == 90.0


def test_decode_limits_travel_as_decode_limits_in_the_spec_and_reach_the_pod(
    app: Application,
) -> None:
    name = next(iter(app.streamlets))
    limits = DecodeLimits(max_items=5000, max_record_bytes=1 << 20, max_batch_bytes=8 << 20)
    tuned = dataclasses.replace(
        app,
        streamlets={
            **app.streamlets,
            name: dataclasses.replace(app.streamlets[name], decode_limits=limits),
        },
    )
    written = spec.to_spec(tuned, spec.PodSettings(image="reg.example/w:1"))
    assert written["streamlets"][name]["decodeLimits"] == {
        "maxItems": 5000,
        "maxRecordBytes": 1 << 20,
        "maxBatchBytes": 8 << 20,
    }
    assert spec.spec_name(("streamlets", name, "decode_limits"), "max_items") == "maxItems"
    body = spec.body(tuned, namespace="ns", pods=spec.PodSettings(image="reg.example/w:1"))
    parsed = spec.parse(body)
    assert parsed.app.streamlets[name].decode_limits == limits
    pod = spec.pod_app_spec(parsed, name)["streamlets"][name]
    assert (
        Application.from_dict({"name": "x", "streamlets": {name: pod}, "topics": {}})
        .streamlets[name]
        .decode_limits
        == limits
    )
