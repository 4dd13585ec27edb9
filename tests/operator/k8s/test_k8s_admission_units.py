"""The operator's admission rules, without a cluster (issue 10, finding 14)."""

from __future__ import annotations

import base64

import pytest

from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import admission, kafka


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


def test_no_allowed_images_means_any_image() -> None:
    assert admission.refuse_image("anything:latest", []) is None


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


def test_the_secrets_bootstrap_wins_over_the_spec() -> None:
    app = Application.from_dict(
        {"name": "a", "streamlets": {}, "topics": {}, "kafka": {"bootstrap": "evil:9092"}}
    )
    config = kafka.admin_config(app, {"bootstrap.servers": "k:9093"})
    assert config["bootstrap.servers"] == "k:9093"
