"""Every Kafka client the CLI makes uses the application's security settings, as replicas do.

Issue 10, finding 17: ``tail``, ``model push`` and ``model status`` built their
clients from ``bootstrap.servers`` alone, so against a blueprint that says
``security.protocol: SSL`` they spoke plaintext (and ``model push`` would
have written a descriptor in the clear). Here the blueprint (or the
``STREAMFLOW_KAFKA_*`` environment) asks for TLS with a CA file that does not
exist: a client that honours the settings cannot even be made, so the command
must fail saying why, and must never read or write the plaintext broker.
No secured broker is needed to tell the two apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner, Result

from streamflow import devkit
from streamflow.cli.main import app
from streamflow.runtime import clients

WINE = Path(__file__).parents[2] / "blueprints" / "wine"
MISSING_CA = "/nonexistent/streamflow-test-ca.pem"
TLS_CONFIG = f"""
kafka:
  config:
    security.protocol: SSL
    ssl.ca.location: {MISSING_CA}
"""
TLS_ENV = {
    "STREAMFLOW_KAFKA_SECURITY_PROTOCOL": "SSL",
    "STREAMFLOW_KAFKA_SSL_CA_LOCATION": MISSING_CA,
}


def invoke(*args: object) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def said(result: Result) -> str:
    return " ".join(result.output.split())


@pytest.fixture
def classifier(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """The wine classifier's blueprint under fresh topic names, next to its streamlets.

    Yields a function-free pair: the suffix of its topics, and the path of a copy
    whose text later tests extend. The models topic holds one record, so a
    plaintext ``tail`` would have something to show.
    """
    # the CLI finds the session's broker as a user's shell would tell it (the suite may
    # have started its own, with no variable set)
    monkeypatch.setenv("STREAMFLOW_KAFKA_BOOTSTRAP", kafka_bootstrap)
    suffix = uuid.uuid4().hex[:8]
    text = (
        (WINE / "classifier.yaml")
        .read_text()
        .replace("name: wine-classifier", f"name: wc-{suffix}")
    )
    for topic in ("wine-features", "wine-models", "wine-predictions", "wine-model-status"):
        text = text.replace(f"{topic}:", f"{topic}-{suffix}:")
    path = WINE / f".kafka-config-{suffix}.yaml"
    path.write_text(text)
    devkit.create_topic(bootstrap_servers=kafka_bootstrap, name=f"wine-models-{suffix}")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(f"wine-models-{suffix}", b"plaintext", b"k")
    assert producer.flush(30) == 0
    try:
        yield suffix, path
    finally:
        path.unlink()


def with_tls(path: Path) -> Path:
    path.write_text(path.read_text() + TLS_CONFIG)
    return path


def assert_refused_for_tls(result: Result) -> None:
    assert result.exit_code == 1, result.output
    text = said(result)
    assert "ssl.ca.location" in text or "SSL" in text, text
    assert "plaintext" not in result.stdout  # the record was never read


def test_tail_uses_the_blueprints_kafka_config(classifier: tuple[str, Path]) -> None:
    suffix, path = classifier
    assert "b'plaintext'" in invoke("tail", path, f"wine-models-{suffix}").output
    assert_refused_for_tls(invoke("tail", with_tls(path), f"wine-models-{suffix}"))


def test_tail_uses_the_streamflow_kafka_environment(
    classifier: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix, path = classifier
    for name, value in TLS_ENV.items():
        monkeypatch.setenv(name, value)
    assert_refused_for_tls(invoke("tail", path, f"wine-models-{suffix}"))


def test_model_status_uses_the_blueprints_kafka_config(classifier: tuple[str, Path]) -> None:
    _, path = classifier
    assert_refused_for_tls(invoke("model", "status", with_tls(path)))


def test_model_push_never_writes_in_the_clear(
    classifier: tuple[str, Path], kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix, path = classifier
    for name, value in TLS_ENV.items():
        monkeypatch.setenv(name, value)
    result = invoke(
        "model", "push", path, "classifier", "--url", "http://127.0.0.1:1", "--timeout", "0"
    )
    assert_refused_for_tls(result)
    monkeypatch.delenv("STREAMFLOW_KAFKA_SECURITY_PROTOCOL")
    monkeypatch.delenv("STREAMFLOW_KAFKA_SSL_CA_LOCATION")
    seen = invoke("tail", path, f"wine-models-{suffix}", "-o", "json")
    assert seen.exit_code == 0 and len(seen.stdout.splitlines()) == 1, seen.output


def test_the_cli_and_the_replicas_merge_the_same_config() -> None:
    from streamflow.blueprint.model import Application, KafkaSpec

    base = Application.from_dict(
        {"name": "m", "streamlets": {}, "topics": {}, "kafka": {"config": {"acks": "1"}}}
    )
    assert base.kafka == KafkaSpec(config={"acks": "1"})
    merged = clients.application_config(
        base, {"STREAMFLOW_KAFKA_ACKS": "all", "STREAMFLOW_KAFKA_SASL_USERNAME": "me"}
    )
    assert merged == {"acks": "all", "sasl.username": "me"}
