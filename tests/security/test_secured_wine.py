"""The wine example on the secured broker, through every command a user types.

`streamflow run` runs it over SASL_SSL with the credentials only in the
environment (`STREAMFLOW_KAFKA_SASL_USERNAME`/`_PASSWORD`); the blueprint says
no more than `security.protocol`, `sasl.mechanism` and `ssl.ca.location`.
`tail`, `model status` and `model push` then work against it with the same
environment; pushing as `serving`, a principal that may read the control topic
but not write it, fails with a clear error while the replicas keep serving
version 1. `streamflow deploy` runs a second copy over mutual TLS, the client
certificate's paths in the environment too. One app per command path, reused
by the tests in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AclOperation, ResourceType  # type: ignore[attr-defined]

from streamflow import devkit
from tests.model_fixtures import WineModels
from tests.security.conftest import grant
from tests.waiting import exited, wait_until
from tests.web import wine

STREAMFLOW = Path(sys.executable).with_name("streamflow")
CLASSIFIER = wine.WINE / "classifier.yaml"


@dataclass
class SecuredApp:
    root: Path
    blueprint: Path
    name: str
    topics: dict[str, str]
    env: dict[str, str]

    def cli(
        self, *args: str, timeout: float = 90, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(STREAMFLOW), *args],
            cwd=self.root,
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def predictions(self, n: int = 5, *, strict: bool = True) -> list[dict[str, Any]]:
        topic = self.topics["wine-predictions"]
        result = self.cli("tail", str(self.blueprint), topic, "-n", str(n), "-o", "json")
        if result.returncode != 0 and not strict:  # the app is still creating its topics
            return []
        assert result.returncode == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFLOW_KAFKA_")}
    env |= {"STREAMFLOW_HOME": str(home), "COLUMNS": "250", "NO_COLOR": "1"}
    return env


def _secured_copy(
    tmp: Path, models: WineModels, *, bootstrap: str, config: dict[str, str], env: dict[str, str]
) -> SecuredApp:
    copy, name, topics = wine.renamed_copy(CLASSIFIER, into=tmp / "project", models=models.dir)
    spec = yaml.safe_load(copy.read_text())
    spec["kafka"] = {"bootstrap": bootstrap, "config": config}
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    return SecuredApp(copy.parent, copy, name, topics, _base_env(tmp / "home") | env)


def _wait_for_predictions(
    app: SecuredApp, process: subprocess.Popen[str] | None, *, version: int
) -> list[dict[str, Any]]:
    def predicted() -> list[dict[str, Any]] | None:
        records = app.predictions(strict=False)
        if any(r["headers"].get("streamflow-model") == f"wine:{version}" for r in records):
            return records
        return None

    def output() -> str:
        """What streamflow printed, once it has exited (its pipe is still open until then)."""
        if process is None or process.poll() is None or process.stdout is None:
            return ""
        return process.stdout.read()

    records: list[dict[str, Any]] = wait_until(
        predicted,
        what=f"predictions of wine:{version}",
        timeout=120,
        interval=1,  # the tail itself takes most of a second
        gave_up=exited(process, "streamflow") if process is not None else None,
        explain=output,
    )
    return records


@pytest.fixture(scope="module")
def sasl_run(
    secured_kafka: devkit.SecuredKafkaBroker,
    wine_models: WineModels,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SecuredApp, subprocess.Popen[str]]]:
    app = _secured_copy(
        tmp_path_factory.mktemp("sasl-run"),
        wine_models,
        bootstrap=secured_kafka.sasl_bootstrap,
        config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "ssl.ca.location": str(secured_kafka.ca_file),
        },
        env={
            "STREAMFLOW_KAFKA_SASL_USERNAME": "streamflow",
            "STREAMFLOW_KAFKA_SASL_PASSWORD": secured_kafka.passwords["streamflow"],
        },
    )
    process = subprocess.Popen(
        [str(STREAMFLOW), "run", str(app.blueprint), "--for", "10m"],
        cwd=app.root,
        env=app.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield app, process
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def test_run_over_sasl_ssl_with_credentials_from_the_environment(
    sasl_run: tuple[SecuredApp, subprocess.Popen[str]],
) -> None:
    app, process = sasl_run
    assert "sasl.password" not in app.blueprint.read_text()
    records = _wait_for_predictions(app, process, version=1)
    assert all("probabilities" in r["value"] for r in records)


def test_model_status_over_sasl_ssl(sasl_run: tuple[SecuredApp, subprocess.Popen[str]]) -> None:
    app, process = sasl_run
    _wait_for_predictions(app, process, version=1)
    result = app.cli("model", "status", str(app.blueprint), "classifier", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert '"version": 1' in result.stdout or '"version":1' in result.stdout, result.stdout


def test_a_principal_without_write_acl_cannot_push_a_model(
    secured_kafka: devkit.SecuredKafkaBroker,
    wine_models: WineModels,
    sasl_run: tuple[SecuredApp, subprocess.Popen[str]],
) -> None:
    app, process = sasl_run
    _wait_for_predictions(app, process, version=1)
    models = app.topics["wine-models"]
    grant(secured_kafka, "serving", ResourceType.TOPIC, models, AclOperation.READ)
    grant(
        secured_kafka,
        "serving",
        ResourceType.TOPIC,
        app.topics["wine-model-status"],
        AclOperation.READ,
    )
    grant(
        secured_kafka,
        "serving",
        ResourceType.GROUP,
        "streamflow-",
        AclOperation.READ,
        prefixed=True,
    )

    started = time.monotonic()
    result = app.cli(
        "model",
        "push",
        str(app.blueprint),
        "classifier",
        "--keras",
        str(wine_models.v2.keras_file),
        "--timeout",
        "20",
        STREAMFLOW_KAFKA_SASL_USERNAME="serving",
        STREAMFLOW_KAFKA_SASL_PASSWORD=secured_kafka.passwords["serving"],
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 60
    assert "authoriz" in result.stderr.lower(), result.stderr
    assert "Traceback" not in result.stderr
    records = app.predictions(20)
    assert {r["headers"].get("streamflow-model") for r in records[-5:]} == {"wine:1"}


def test_model_push_over_sasl_ssl_as_a_principal_that_may(
    wine_models: WineModels, sasl_run: tuple[SecuredApp, subprocess.Popen[str]]
) -> None:
    app, process = sasl_run
    _wait_for_predictions(app, process, version=1)
    result = app.cli(
        "model",
        "push",
        str(app.blueprint),
        "classifier",
        "--keras",
        str(wine_models.v2.keras_file),
        "--version",
        "2",
        "--timeout",
        "60",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    _wait_for_predictions(app, process, version=2)


def test_tail_with_a_wrong_password_says_authentication_failed(
    sasl_run: tuple[SecuredApp, subprocess.Popen[str]],
) -> None:
    app, _ = sasl_run
    started = time.monotonic()
    result = app.cli(
        "tail",
        str(app.blueprint),
        app.topics["wine-predictions"],
        "-n",
        "1",
        STREAMFLOW_KAFKA_SASL_PASSWORD="not-the-password",
    )
    assert result.returncode == 1
    assert time.monotonic() - started < 30, "a wrong password must not look like a hang"
    assert "SASL authentication failed" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_tail_with_an_untrusted_ca_says_certificate_verification_failed(
    secured_kafka: devkit.SecuredKafkaBroker, sasl_run: tuple[SecuredApp, subprocess.Popen[str]]
) -> None:
    app, _ = sasl_run
    result = app.cli(
        "tail",
        str(app.blueprint),
        app.topics["wine-predictions"],
        "-n",
        "1",
        STREAMFLOW_KAFKA_SSL_CA_LOCATION=str(secured_kafka.pki.untrusted_ca.certificate),
    )
    assert result.returncode == 1
    assert "TLS certificate verification failed" in result.stderr, result.stderr


def _mtls_env(broker: devkit.SecuredKafkaBroker, pair: Any) -> dict[str, str]:
    return {
        "STREAMFLOW_KAFKA_SSL_CERTIFICATE_LOCATION": str(pair.certificate),
        "STREAMFLOW_KAFKA_SSL_KEY_LOCATION": str(pair.key),
    }


@pytest.fixture(scope="module")
def mtls_deploy(
    secured_kafka: devkit.SecuredKafkaBroker,
    wine_models: WineModels,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SecuredApp]:
    app = _secured_copy(
        tmp_path_factory.mktemp("mtls-deploy"),
        wine_models,
        bootstrap=secured_kafka.mtls_bootstrap,
        config={"security.protocol": "SSL", "ssl.ca.location": str(secured_kafka.ca_file)},
        env=_mtls_env(secured_kafka, secured_kafka.pki.clients["streamflow"]),
    )
    try:
        # the CLI's own bound, inside the test's: a deploy that fails says which replica
        # was not ready, and why, before the test would kill it
        result = app.cli("deploy", str(app.blueprint), "--timeout", "150s", timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr + _replica_logs(app)
        yield app
    finally:
        app.cli("undeploy", app.name, timeout=120)  # the daemon exits with its last app
        daemon = Path(app.env["STREAMFLOW_HOME"]) / "operator" / "daemon.json"
        if daemon.exists():  # a failed deploy may leave it: stop it (and its replicas)
            with contextlib.suppress(OSError, ValueError, KeyError):
                os.kill(int(json.loads(daemon.read_text())["pid"]), signal.SIGTERM)


def _replica_logs(app: SecuredApp) -> str:
    """The last lines of each streamlet's replicas: why a deploy was not ready."""
    told = []
    for streamlet in yaml.safe_load(app.blueprint.read_text())["streamlets"]:
        try:
            result = app.cli("logs", app.name, streamlet, "--tail", "40", timeout=30)
            told.append(f"--- {streamlet}\n{result.stdout}{result.stderr}")
        except subprocess.TimeoutExpired:
            told.append(f"--- {streamlet}: its logs did not come within 30 s")
    return "\n".join(told)


def test_deploy_over_mutual_tls(mtls_deploy: SecuredApp) -> None:
    records = _wait_for_predictions(mtls_deploy, None, version=1)
    assert records


def test_deploy_with_an_expired_client_certificate_says_so(
    secured_kafka: devkit.SecuredKafkaBroker, mtls_deploy: SecuredApp
) -> None:
    started = time.monotonic()
    result = mtls_deploy.cli(
        "tail",
        str(mtls_deploy.blueprint),
        mtls_deploy.topics["wine-predictions"],
        "-n",
        "1",
        **_mtls_env(secured_kafka, secured_kafka.pki.expired),
    )
    assert result.returncode == 1
    assert time.monotonic() - started < 30
    assert "rejected this client's TLS certificate" in result.stderr, result.stderr
    assert "expired on" in result.stderr, result.stderr


def test_deploy_with_a_wrong_password_fails_naming_authentication(
    secured_kafka: devkit.SecuredKafkaBroker,
    wine_models: WineModels,
    tmp_path: Path,
) -> None:
    app = _secured_copy(
        tmp_path,
        wine_models,
        bootstrap=secured_kafka.sasl_bootstrap,
        config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "ssl.ca.location": str(secured_kafka.ca_file),
        },
        env={
            "STREAMFLOW_KAFKA_SASL_USERNAME": "streamflow",
            "STREAMFLOW_KAFKA_SASL_PASSWORD": "not-the-password",
        },
    )
    started = time.monotonic()
    result = app.cli("deploy", str(app.blueprint), timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 60
    assert "SASL authentication failed" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
