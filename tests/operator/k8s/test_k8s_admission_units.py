"""The operator's admission rules, without a cluster (issue 10, finding 14)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamflow.blueprint.model import Application
from streamflow.cli.main import app
from streamflow.operator import targets
from streamflow.operator.kubernetes import admission, kafka, spec
from streamflow.operator.kubernetes.target import KubernetesTarget
from streamflow.operator.local import store
from streamflow.operator.local.target import LocalTarget


def app_with(config: dict[str, str]) -> Application:
    return Application.from_dict(
        {"name": "a", "streamlets": {}, "topics": {}, "kafka": {"config": config}}
    )


@pytest.mark.parametrize(
    "key",
    [
        "security.protocol",
        "SECURITY_PROTOCOL",
        "ssl.endpoint.identification.algorithm",
        "ssl_ca_location",
        "enable.ssl.certificate.verification",
        "sasl.kerberos.kinit.cmd",
        "sasl.mechanism",
        "enable.sasl.oauthbearer.unsecure.jwt",
        "plugin.library.paths",
        "ssl.engine.location",
        "https.ca.location",
        "bootstrap.servers",
        "metadata.broker.list",
        "basic.auth.user.info",
    ],
)
def test_security_settings_are_refused_naming_the_key(key: str) -> None:
    refusal = admission.refuse_config(app_with({key: "x", "linger.ms": "5"}))
    assert refusal is not None and refusal.reason == "ForbiddenKafkaConfig"
    assert key in refusal.message and "linger.ms" not in refusal.message


def test_tuning_settings_are_admitted() -> None:
    config = {"linger.ms": "5", "compression.type": "zstd", "fetch.max.bytes": "1048576"}
    assert admission.refuse_config(app_with(config)) is None


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("registry.internal/streamflow:1.2", True),
        ("registry.internal/streamflow", True),
        ("registry.internal/streamflow@sha256:" + "0" * 64, True),
        ("registry.internal/streamflow/extra:1", True),
        ("registry.internal/streamflow-miner:1", False),
        ("registry.internal.evil.com/streamflow:1", False),
        ("ghcr.io/acme/anything:7", True),
        ("ghcr.io/acmeinc/x:1", False),
        ("docker.io/library/busybox", False),
    ],
)
def test_images_match_a_glob_or_a_prefix_at_a_boundary(image: str, allowed: bool) -> None:
    patterns = ["registry.internal/streamflow", "ghcr.io/acme/*"]
    assert admission.image_allowed(image, patterns) is allowed
    assert (admission.refuse_image(image, patterns) is None) is allowed


# -- which images, when the operator is given none: secure by default --------------------------


@pytest.mark.parametrize(
    ("own_image", "registry"),
    [
        ("ghcr.io/acme/streamflow:0.1.0", "ghcr.io/acme/"),
        ("ghcr.io/acme/team/streamflow:0.1.0", "ghcr.io/acme/team/"),
        ("registry.internal:5000/streamflow@sha256:" + "0" * 64, "registry.internal:5000/"),
        ("registry.internal/streamflow:0.1.0", "registry.internal/"),
        ("localhost/streamflow:0.1.0-0123abcd", "localhost/"),  # what `streamflow build` tags
        ("acme/streamflow:1", "acme/"),  # Docker Hub's acme/
        # Docker Hub's official images are everyone's registry, not the operator's own
        ("streamflow:0.1.0", None),
        ("docker.io/streamflow:0.1.0", None),
        ("docker.io/library/streamflow:0.1.0", None),
        ("index.docker.io/library/streamflow", None),
        ("", None),
        (None, None),
    ],
)
def test_the_default_is_the_registry_of_the_operators_own_image(
    own_image: str | None, registry: str | None
) -> None:
    assert admission.own_registry(own_image) == registry
    expected = (registry,) if registry else ()
    assert admission.allowed_images([], own_image=own_image) == expected


def test_by_default_a_foreign_image_is_refused_and_the_operators_registry_admitted() -> None:
    patterns = admission.allowed_images([], own_image="ghcr.io/acme/streamflow:0.1.0")
    refusal = admission.refuse_image("attacker.example/anything:latest", patterns)
    assert refusal is not None and refusal.reason == "ImageNotAllowed"
    assert "'attacker.example/anything:latest'" in refusal.message
    assert "ghcr.io/acme/" in refusal.message and "--allowed-images" in refusal.message
    assert admission.refuse_image("ghcr.io/acme/wine:1", patterns) is None
    assert admission.refuse_image("ghcr.io/acme/team/wine@sha256:" + "0" * 64, patterns) is None
    for foreign in ("ghcr.io/acmeinc/wine:1", "ghcr.io/acme.evil/wine:1", "ghcr.io/wine:1"):
        assert admission.refuse_image(foreign, patterns) is not None, foreign


def test_given_patterns_replace_the_default() -> None:
    given = ["registry.internal/streamflow", "ghcr.io/acme/*"]
    own = "localhost/streamflow:0.1.0"
    assert admission.allowed_images(given, own_image=own) == tuple(given)
    assert admission.refuse_image(
        "localhost/wine:1", admission.allowed_images(given, own_image=own)
    )


def test_no_allowed_images_means_no_image() -> None:
    """No patterns (no --allowed-images, no registry of its own) admit nothing, and say so."""
    for image in ("anything:latest", "attacker.example/anything:latest", ""):
        refusal = admission.refuse_image(image, [])
        assert refusal is not None and refusal.reason == "ImageNotAllowed"
        assert "admits no image" in refusal.message and "--allowed-images" in refusal.message


def test_an_explicit_star_admits_any_image() -> None:
    assert admission.ANY_IMAGE == "*"
    for image in ("anything:latest", "attacker.example/anything:latest", "a/b/c@sha256:00"):
        assert admission.refuse_image(image, [admission.ANY_IMAGE]) is None


@pytest.mark.parametrize(
    ("given", "own_image", "says"),
    [
        ([], "ghcr.io/acme/streamflow:1", "admits the images under ghcr.io/acme/, the registry "
         "of its own image ghcr.io/acme/streamflow:1"),
        (["registry.internal/streamflow", "ghcr.io/acme/*"], "ghcr.io/acme/streamflow:1",
         "admits the images matching registry.internal/streamflow, ghcr.io/acme/* "
         "(--allowed-images)"),
        (["*"], None, "admits any image (--allowed-images '*')"),
        ([], None, "admits no image: its own image is unknown"),
        ([], "streamflow:0.1.0", "admits no image: its own image streamflow:0.1.0 names no "
         "registry of its own"),
    ],
)  # fmt: skip
def test_the_operator_says_at_start_which_images_it_admits(
    given: list[str], own_image: str | None, says: str
) -> None:
    line = admission.describe_allowed_images(given, own_image=own_image)
    assert line.startswith(says), line
    if "admits no image" in says:
        assert "--allowed-images" in line and "'*'" in line


def test_operator_run_help_says_what_is_admitted_by_default() -> None:
    result = CliRunner().invoke(app, ["operator", "run", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "Default: the registry of the operator's own image" in text
    assert "'*' admits any image" in text
    assert "STREAMFLOW_OPERATOR_IMAGE" in text


def _secret(labels: dict[str, str], **data: str) -> dict[str, object]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"name": "s", "labels": labels}, "data": encoded}


def test_only_a_labelled_secret_with_a_bootstrap_gives_credentials() -> None:
    good = _secret({kafka.CREDENTIALS_LABEL: "true"}, BOOTSTRAP="k:9093", SASL_PASSWORD="pw")
    assert kafka.credentials(good, name="s") == {
        "bootstrap.servers": "k:9093",
        "sasl.password": "pw",
    }
    for bad, why in [
        (None, "does not exist"),
        (_secret({}, BOOTSTRAP="k:9093", SASL_PASSWORD="pw"), kafka.CREDENTIALS_LABEL),
        (_secret({kafka.CREDENTIALS_LABEL: "yes"}, BOOTSTRAP="k:9093"), kafka.CREDENTIALS_LABEL),
        (_secret({kafka.CREDENTIALS_LABEL: "true"}, SASL_PASSWORD="pw"), "BOOTSTRAP"),
    ]:
        with pytest.raises(kafka.CredentialsError) as caught:
            kafka.credentials(bad, name="s")
        assert why in str(caught.value) and "pw" not in str(caught.value)


def resource_with(kafka_spec: dict[str, object], *, image: str = "img:1") -> spec.AppResource:
    body = {
        "metadata": {"name": "a", "namespace": "prod", "uid": "u", "generation": 1},
        "spec": {"name": "a", "streamlets": {}, "topics": {}, "kafka": kafka_spec, "image": image},
    }
    return spec.parse(body)


def test_the_secrets_bootstrap_wins_over_the_spec() -> None:
    resource = resource_with({"bootstrap": "evil:9092", "secret": "s"})
    settings = admission.client_settings(
        resource, credentials=lambda _: {"bootstrap.servers": "k:9093"}
    )
    assert settings.bootstrap == "k:9093"


def test_client_settings_refuse_what_admission_refuses_and_read_no_secret_first() -> None:
    read: list[str] = []

    def credentials(resource: spec.AppResource) -> dict[str, str] | None:
        read.append(resource.name)
        raise kafka.CredentialsError("Secret 's' is not labelled")

    config = {"plugin.library.paths": "/some/lib", "linger.ms": "5"}
    with pytest.raises(admission.RefusedError) as refused:
        admission.client_settings(resource_with({"config": config}), credentials=credentials)
    assert refused.value.refusal.reason == "ForbiddenKafkaConfig" and read == []
    with pytest.raises(admission.RefusedError) as refused:
        admission.client_settings(resource_with({"secret": "s"}), credentials=credentials)
    assert refused.value.refusal.reason == "SecretNotAllowed" and read == ["a"]
    admitted = admission.client_settings(
        resource_with({"bootstrap": "k:9092", "config": {"linger.ms": "5"}}),
        credentials=lambda _: None,
    )
    assert dict(admitted.config) == {"linger.ms": "5", "bootstrap.servers": "k:9092"}


@pytest.mark.parametrize(
    ("pattern", "image", "allowed"),
    [
        ("registry.internal", "registry.internal/streamflow:1", True),
        ("registry.internal", "registry.internal:5000/anything", False),  # another endpoint
        ("registry.internal", "registry.internal@sha256:" + "0" * 64, False),
        ("registry.internal", "registry.internal.evil.com/x", False),
        ("registry.internal:5000", "registry.internal:5000/x:1", True),
        ("registry.internal:5000", "registry.internal:50001/x", False),
        ("registry.internal/team", "registry.internal/team:1", True),  # a repository's tag
    ],
)
def test_a_pattern_without_a_slash_is_a_registry_endpoint(
    pattern: str, image: str, allowed: bool
) -> None:
    assert admission.image_allowed(image, [pattern]) is allowed


class SecretsCluster:
    """What KubernetesTarget.kafka_client_config reads: the resource and its Secret."""

    def __init__(self, kafka_spec: dict[str, object], secret: dict[str, object] | None) -> None:
        self.app = {
            "metadata": {"name": "a", "namespace": "prod", "uid": "u", "generation": 1},
            "spec": {"name": "a", "streamlets": {}, "topics": {}, "kafka": kafka_spec},
        }
        self.stored_secret = secret
        self.secrets_read: list[str] = []

    def get_app(self, namespace: str, name: str) -> dict[str, object]:
        return self.app

    def secret(self, namespace: str, name: str) -> dict[str, object] | None:
        self.secrets_read.append(name)
        return self.stored_secret


def target_on(cluster: SecretsCluster, tmp_path: Path) -> KubernetesTarget:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_KUBECONFIG)
    target = KubernetesTarget(kubeconfig=str(kubeconfig), namespace="prod")
    target.cluster = cluster  # type: ignore[assignment]
    return target


_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_the_kubernetes_target_hands_out_only_admitted_client_configs(tmp_path: Path) -> None:
    labelled = {kafka.CREDENTIALS_LABEL: "true"}
    good = SecretsCluster(
        {"bootstrap": "evil:9092", "secret": "s", "config": {"linger.ms": "5"}},
        _secret(labelled, BOOTSTRAP="k:9093", SASL_PASSWORD="pw"),
    )
    assert target_on(good, tmp_path).kafka_client_config("a") == {
        "linger.ms": "5",
        "bootstrap.servers": "k:9093",
        "sasl.password": "pw",
    }
    forbidden = SecretsCluster(
        {"secret": "s", "config": {"plugin.library.paths": "/some/lib"}},
        _secret(labelled, BOOTSTRAP="k:9093"),
    )
    with pytest.raises(targets.TargetError, match=r"plugin\.library\.paths"):
        target_on(forbidden, tmp_path).kafka_client_config("a")
    assert forbidden.secrets_read == []
    unlabelled = SecretsCluster({"secret": "s"}, _secret({}, BOOTSTRAP="k:9093"))
    with pytest.raises(targets.TargetError, match=kafka.CREDENTIALS_LABEL):
        target_on(unlabelled, tmp_path).kafka_client_config("a")


def test_the_local_target_hands_out_its_replicas_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Application.from_dict(
        {"name": "a", "streamlets": {}, "topics": {}, "kafka": {"config": {"linger.ms": "5"}}}
    )
    home = store.Home(tmp_path)
    store.write_json(home.app("a").spec, app.to_dict())
    store.write_json(home.app("a").runtime, {"target": "local", "bootstrap": "localhost:9092"})
    monkeypatch.setenv("STREAMFLOW_KAFKA_SASL_PASSWORD", "pw")
    assert LocalTarget(home=tmp_path).kafka_client_config("a") == {
        "linger.ms": "5",
        "sasl.password": "pw",
        "bootstrap.servers": "localhost:9092",
    }
