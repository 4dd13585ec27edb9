"""Specs that run anywhere: paths from the image's root, Kubernetes field names, least privilege.

Each rule here was found by rendering what the operator writes for a real
blueprint: a pod without the blueprint's directory as its working directory,
the deploying machine's paths in the spec, an unqualified default image,
snake_case fields, grants nothing uses, a ConfigMap left stale by a change to
another streamlet, credentials rotated under pods that never restarted. All
pure: no cluster, no Kafka.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from ruamel.yaml import YAML

from streamflow.blueprint import load_application
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import crd, kafka, leftovers, manifests, resources, spec
from streamflow.operator.kubernetes.classes import Facts
from tests.operator.k8s.support import BLUEPRINT, make_application

ROOT = Path(__file__).parents[3]
STREAMFLOW = Path(sys.executable).with_name("streamflow")
EXECUTOR = ROOT / "streamflow" / "operator" / "kubernetes" / "executor.py"


@pytest.fixture(scope="module")
def app() -> Application:
    return make_application(bootstrap="kafka:9092")


def resource_of(app: Application, pods: spec.PodSettings | None = None) -> spec.AppResource:
    body = spec.body(app, namespace="prod", pods=pods or spec.PodSettings(image="reg.example/w:1"))
    body["metadata"].update(uid="u-1", generation=1)
    return spec.parse(body, root=spec.APP_ROOT)


def container(resource: spec.AppResource, streamlet: str) -> dict[str, Any]:
    deployment = resources.deployment(resource, streamlet, Facts(config={}))
    return deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


# -- (2) relative paths: the pods work in the blueprint's directory, as local replicas do --------


def test_pods_work_in_the_blueprints_directory_inside_the_image(app: Application) -> None:
    resource = resource_of(app)
    for streamlet in app.streamlets:
        assert container(resource, streamlet)["workingDir"] == "/app/tests/operator/k8s/app"


def test_the_pods_app_spec_resolves_from_their_working_directory(app: Application) -> None:
    pod_spec = json.loads(
        resources.config_map(resource_of(app), "scorer", Facts({}))["data"]["app.json"]
    )
    assert pod_spec["source"] == "blueprint.yaml"
    assert pod_spec["python_paths"] == [".", "../../../../blueprints/wine"]
    workdir = Path(container(resource_of(app), "scorer")["workingDir"])
    resolved = {(workdir / p).resolve().as_posix() for p in pod_spec["python_paths"]}
    assert resolved == {"/app/tests/operator/k8s/app", "/app/blueprints/wine"}


# -- (3) no path of the deploying machine in the spec or the ConfigMaps -------------------------


def test_no_path_of_the_deploying_machine_reaches_the_cluster(app: Application) -> None:
    body = spec.body(app, namespace="prod", pods=spec.PodSettings(image="reg.example/w:1"))
    assert str(ROOT) not in json.dumps(body)
    assert body["spec"]["blueprintDir"] == "tests/operator/k8s/app"
    assert body["spec"]["source"] == "blueprint.yaml"
    resource = resource_of(app)
    for streamlet in app.streamlets:
        written = resources.config_map(resource, streamlet, Facts(config={}))
        assert str(ROOT) not in json.dumps(written)


def test_the_operator_finds_the_files_under_its_root(app: Application, tmp_path: Path) -> None:
    body = spec.body(app, namespace="prod", pods=spec.PodSettings(image="reg.example/w:1"))
    parsed = spec.parse(body, root=tmp_path)
    assert parsed.app.source == str(tmp_path / "tests/operator/k8s/app/blueprint.yaml")
    assert str(tmp_path / "blueprints/wine") in parsed.app.python_paths


def test_a_path_outside_the_project_is_refused_at_deploy_time(
    app: Application, tmp_path: Path
) -> None:
    outside = dataclasses.replace(app, schema_paths=(*app.schema_paths, str(tmp_path)))
    with pytest.raises(spec.PathError, match="outside the project"):
        spec.to_spec(outside, spec.PodSettings(image="reg.example/w:1"))


def test_a_spec_naming_an_absolute_or_escaping_path_is_invalid(app: Application) -> None:
    body = spec.body(app, namespace="prod", pods=spec.PodSettings(image="reg.example/w:1"))
    for key, value in (("pythonPaths", ["/home/someone/wine"]), ("blueprintDir", "../etc")):
        bad = {**body, "spec": {**body["spec"], key: value}}
        with pytest.raises(spec.SpecError, match=re.escape(f"spec.{key}")):
            spec.parse(bad)


# -- (4) no unqualified default image ----------------------------------------------------------


def test_there_is_no_default_image_and_the_crd_requires_one(app: Application) -> None:
    assert spec.PodSettings().image == ""
    assert "image" not in spec.to_spec(app)
    assert "image" in crd.spec_schema()["required"]


def test_dry_run_prints_the_resource_without_a_cluster() -> None:
    result = subprocess.run(
        [
            str(STREAMFLOW),
            "deploy",
            str(BLUEPRINT),
            "--target=kubernetes",
            "--dry-run",
            "--image=reg.example/wine:1",
            "-b",
            "kafka.kafka:9092",
            "-o",
            "yaml",
            "--kubeconfig=/nonexistent",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    resource = YAML(typ="safe").load(result.stdout)
    assert resource["kind"] == "StreamflowApplication"
    assert resource["spec"]["image"] == "reg.example/wine:1"
    assert resource["spec"]["kafka"]["bootstrap"] == "kafka.kafka:9092"
    assert str(ROOT) not in result.stdout


def test_a_kubernetes_deploy_without_an_image_says_so() -> None:
    result = subprocess.run(
        [
            str(STREAMFLOW),
            "deploy",
            str(BLUEPRINT),
            "--target=kubernetes",
            "--dry-run",
            "-b",
            "kafka.kafka:9092",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert "--image" in result.stderr and "Traceback" not in result.stderr


# -- Kubernetes API conventions ----------------------------------------------------------------

_FREE_FORM = {"config", "ephemeral-storage"}  # data, and Kubernetes' own resource name


def _keys(schema: dict[str, Any], where: str = "spec") -> list[str]:
    found = []
    for key, sub in (schema.get("properties") or {}).items():
        found.append(f"{where}.{key}")
        if key not in _FREE_FORM:
            found += _keys(sub, f"{where}.{key}")
            found += _keys(sub.get("additionalProperties") or {}, f"{where}.{key}.*")
            found += _keys(sub.get("items") or {}, f"{where}.{key}[]")
    return found


def test_every_field_of_the_spec_is_camel_case(app: Application) -> None:
    keys = _keys(crd.spec_schema())
    assert "spec.pythonPaths" in keys and "spec.streamlets.*.autoscale.targetLag" in keys
    wrong = [k for k in keys if not re.fullmatch(r"[a-z][a-zA-Z0-9]*", k.rsplit(".", 1)[-1])]
    assert wrong == [k for k in keys if k.endswith(".ephemeral-storage")]
    written = json.dumps(spec.to_spec(app, spec.PodSettings(image="reg.example/w:1")))
    assert "_paths" not in written and "image_pull_policy" not in written


# -- RBAC: exactly what the code calls ---------------------------------------------------------

_VERBS = {"read": "get", "replace": "update"}
_KINDS = {"config_map": "configmaps", "deployment": "deployments", "service": "services",
          "secret": "secrets", "job": "jobs", "pod": "pods", "pod_log": "pods/log",
          "event": "events"}  # fmt: skip


def test_the_role_grants_exactly_what_the_executor_calls() -> None:
    """The core, apps and batch calls of the executor, plus the watches of kopf's handlers."""
    pattern = r"self\.(?:core|apps|batch)\.(\w+?)_namespaced_(\w+)\b"
    calls = re.findall(pattern, EXECUTOR.read_text())
    needed = {(_KINDS[kind], _VERBS.get(verb, verb)) for verb, kind in calls}
    needed.add(("deployments", "watch"))  # handlers.py: @kopf.on.event on apps/v1 deployments
    needed.add(("jobs", "watch"))  # handlers.py: @kopf.on.event on the verifier's batch/v1 jobs
    # The executor posts events (handlers.ApiEvents); kopf posts its own on handler failures too.
    needed.add(("events", "create"))
    role = manifests.rbac()[1]
    granted = {
        (resource, verb)
        for rule in role["rules"]
        if rule["apiGroups"] in ([""], ["apps"], ["batch"])
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == needed


# -- ConfigMaps are never a stale copy ---------------------------------------------------------


def test_a_config_map_changes_exactly_when_its_streamlets_pods_roll(app: Application) -> None:
    before = resource_of(app)
    configured = resource_of(app.with_config("scorer", {"threshold": 7.5}))
    scaled = resource_of(app.with_replicas("logger", 5))
    for streamlet in app.streamlets:
        data = resources.config_map(before, streamlet, Facts({}))["data"]["app.json"]
        assert (
            resources.config_map(configured, streamlet, Facts({}))["data"]["app.json"] == data
        ) == (streamlet != "scorer")
        assert resources.config_map(scaled, streamlet, Facts({}))["data"]["app.json"] == data
        assert resources.checksum(scaled, streamlet) == resources.checksum(before, streamlet)


# -- (8) resources, Secret rotation --------------------------------------------------------------


def test_rotating_the_secrets_data_changes_every_pods_checksum(app: Application) -> None:
    resource = resource_of(app)
    one = dataclasses.replace(resource, secret_digest=kafka.secret_digest({"data": {"K": "YQ=="}}))
    two = dataclasses.replace(resource, secret_digest=kafka.secret_digest({"data": {"K": "Yg=="}}))
    for streamlet in app.streamlets:
        assert resources.checksum(one, streamlet) != resources.checksum(two, streamlet)


def test_a_streamlet_that_follows_a_model_gets_a_serving_default() -> None:
    classifier = load_application(ROOT / "blueprints" / "wine" / "classifier.yaml")
    written = spec.to_spec(classifier, spec.PodSettings(image="reg.example/w:1"))
    assert written["streamlets"]["classifier"]["resources"]["limits"]["memory"] == "1Gi"
    assert "resources" not in written["streamlets"]["samples"]
    parsed = spec.parse({"metadata": {"name": "c"}, "spec": written}, root=spec.APP_ROOT)
    assert parsed.pods.resources_of("classifier")["limits"]["memory"] == "1Gi"
    assert parsed.pods.resources_of("samples")["limits"]["memory"] == "512Mi"


def test_a_blueprints_resources_win_over_the_defaults(app: Application) -> None:
    own = {"requests": {"cpu": "2"}, "limits": {"memory": "3Gi"}}
    streamlets = dict(app.streamlets)
    streamlets["scorer"] = dataclasses.replace(streamlets["scorer"], resources=own)
    sized = dataclasses.replace(app, streamlets=streamlets)
    got = container(resource_of(sized), "scorer")["resources"]
    assert got == {"requests": {"cpu": "2", "memory": "128Mi"}, "limits": {"memory": "3Gi"}}


# -- what is left of a deleted application ------------------------------------------------------


class _Listings:
    """The list calls of leftovers.find: none of a kind left, or 403 for the forbidden ones."""

    def __init__(self, forbidden: set[str]) -> None:
        self.forbidden = forbidden

    def __getattr__(self, call: str) -> Any:
        def listing(namespace: str, **_: Any) -> Any:
            if call.removeprefix("list_namespaced_") in self.forbidden:
                raise ApiException(status=403, reason="Forbidden")
            return type("Response", (), {"data": b'{"items": []}'})()

        return listing


class _Cluster:
    def __init__(self, forbidden: set[str]) -> None:
        self.apps = self.core = _Listings(forbidden)

    def get_app(self, namespace: str, name: str) -> None:
        return None


def test_a_kind_it_may_not_list_is_not_nothing_left() -> None:
    assert leftovers.find(_Cluster(set()), "prod", "wine").gone  # type: ignore[arg-type]
    left = leftovers.find(_Cluster({"pod"}), "prod", "wine")  # type: ignore[arg-type]
    assert not left.gone and left.unseen == ("pods",)
    assert "pods unknown" in left.progress()
    assert any("cannot tell whether any pods are left" in p for p in left.problems())
