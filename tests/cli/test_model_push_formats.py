"""``model push`` and ``model status`` on control and status topics in other formats.

The descriptor is written in the control topic's format and the statuses are
read in the status topic's, so a real replica (the wine classifier, through
the same entry point as a pod) must load what ``push`` wrote and ``push``
must understand what the replica answers. The records on the control topic
are checked as bytes too: plain JSON, or the registry wire format with the id
the registry gave the descriptor's schema.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from streamflow.blueprint.model import Application
from streamflow.schema.formats import RegisterPolicy
from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import serving_support as s

STREAMFLOW = str(Path(sys.executable).with_name("streamflow"))


def _app(bootstrap: str, cache: Path, *, control: str, status: str) -> Application:
    return support.make_app(
        bootstrap,
        streamlets={
            "classifier": {
                "class": "classifier_app:WineClassifier",
                "config": {**s.CONFIG, "cache_dir": str(cache)},
            }
        },
        topics={
            "features": {"consumers": ["classifier.in"]},
            "models": {
                "consumers": ["classifier.model"],
                "config": {"cleanup.policy": "compact"},
                "format": control,
            },
            "predictions": {"producers": ["classifier.out"]},
            "status": {"producers": ["classifier.status"], "format": status},
        },
        schema_paths=[s.SCHEMAS],
        python_paths=[s.WINE],
    )


def _with_registry(app: Application, url: str, register: RegisterPolicy) -> Application:
    kafka = dataclasses.replace(app.kafka, schema_registry=url, register=register)
    return dataclasses.replace(app, kafka=kafka)


def _register(home: Path, app: Application, bootstrap: str) -> None:
    """The app as ``run`` leaves it: its spec (with its registry) and where its Kafka is."""
    folder = home / "apps" / app.name
    folder.mkdir(parents=True)
    (folder / "app.json").write_text(json.dumps(app.to_dict()))
    (folder / "runtime.json").write_text(json.dumps({"bootstrap": bootstrap}))


def _cli(*args: str, home: Path, bootstrap: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("STREAMFLOW_KAFKA_BOOTSTRAP", "STREAMFLOW_SCHEMA_REGISTRY_URL")
    }
    env.update(STREAMFLOW_HOME=str(home), NO_COLOR="1", COLUMNS="200")
    return subprocess.run(
        [STREAMFLOW, *args, "-b", bootstrap],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def _push_and_check_status(
    app: Application, home: Path, bootstrap: str, models: WineModels, tmp_path: Path
) -> tuple[bytes, subprocess.CompletedProcess[str]]:
    """Push v1 to one running replica; the raw descriptor record and the push's result.

    v1 as ONNX: what is tested is the formats of the control and status topics, which
    are the same for every kind, and a replica serving ONNX needs no TensorFlow (its
    import is most of a Keras replica's CPU).
    """
    with support.replicas(app, tmp_path) as running:
        running.start("classifier", 0)
        pushed = _cli(
            "model",
            "push",
            app.name,
            "classifier",
            "--onnx",
            str(models.v1.onnx_file),
            "--name",
            "wine",
            home=home,
            bootstrap=bootstrap,
        )
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr + running.log()
        assert "pushed wine:1" in pushed.stdout
        assert "classifier serves wine:1 on 1/1 replicas" in pushed.stderr
        status = _cli("model", "status", app.name, "-o", "json", home=home, bootstrap=bootstrap)
        assert status.returncode == 0, status.stderr
        rows = json.loads(status.stdout)
        assert [(r["replica"], r["version"], r["state"]) for r in rows] == [
            ("classifier-0", 1, "serving")
        ]
    written = support.consume_until(
        bootstrap, support.topic(app, "models"), support.count_at_least(1)
    )
    assert len(written) == 1
    return written[0].value() or b"", pushed


def test_push_writes_json_and_reads_json_statuses(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels
) -> None:
    home = tmp_path / "home"
    app = _app(kafka_bootstrap, tmp_path / "cache", control="json", status="json")
    _register(home, app, kafka_bootstrap)
    raw, _ = _push_and_check_status(app, home, kafka_bootstrap, wine_models, tmp_path)
    descriptor = json.loads(raw)  # plain JSON, bytes as base64, as any JSON client reads it
    assert (descriptor["name"], descriptor["version"], descriptor["kind"]) == ("wine", 1, "ONNX")
    status = support.consume_until(
        kafka_bootstrap, support.topic(app, "status"), support.count_at_least(2)
    )
    assert {json.loads(m.value() or b"")["state"] for m in status} >= {"loading", "serving"}


def test_push_registers_the_descriptor_and_reads_registry_statuses(
    kafka_bootstrap: str,
    tmp_path: Path,
    wine_models: WineModels,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
) -> None:
    home = tmp_path / "home"
    app = _app(kafka_bootstrap, tmp_path / "cache", control="avro-registry", status="json-registry")
    app = _with_registry(app, schema_registry_url, RegisterPolicy.AUTO)
    _register(home, app, kafka_bootstrap)
    raw, _ = _push_and_check_status(app, home, kafka_bootstrap, wine_models, tmp_path)
    registered = schema_registry_client.get_latest_version(f"{support.topic(app, 'models')}-value")
    assert raw[0] == 0 and int.from_bytes(raw[1:5], "big") == registered.schema_id
    assert json.loads(registered.schema.schema_str)["name"].endswith("ModelDescriptor")


def test_push_to_a_registry_topic_whose_schema_is_not_registered_writes_nothing(
    kafka_bootstrap: str, tmp_path: Path, schema_registry_url: str
) -> None:
    home = tmp_path / "home"
    app = _app(kafka_bootstrap, tmp_path / "cache", control="avro-registry", status="json")
    _register(home, _with_registry(app, schema_registry_url, RegisterPolicy.NEVER), kafka_bootstrap)
    result = _cli(
        "model",
        "push",
        app.name,
        "classifier",
        "--url",
        "http://127.0.0.1:1",
        home=home,
        bootstrap=kafka_bootstrap,
    )
    output = " ".join(result.stderr.split())
    assert result.returncode == 1, result.stdout + output
    subject = f"{support.topic(app, 'models')}-value"
    assert f"not registered under subject '{subject}'" in output and "register: auto" in output
    assert "Traceback" not in output and "pushed" not in result.stdout
    assert _end_offset(kafka_bootstrap, support.topic(app, "models")) == 0


def _end_offset(bootstrap: str, topic: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        reader.close()


def test_push_and_status_on_registry_topics_without_a_registry_say_how_to_name_one(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    app = _app(kafka_bootstrap, tmp_path / "cache", control="avro-registry", status="json-registry")
    _register(home, app, kafka_bootstrap)
    results: list[Any] = [
        _cli(
            "model",
            "push",
            app.name,
            "classifier",
            "--url",
            "http://127.0.0.1:1",
            home=home,
            bootstrap=kafka_bootstrap,
        ),
        _cli("model", "status", app.name, home=home, bootstrap=kafka_bootstrap),
    ]
    for result in results:
        output = " ".join(result.stderr.split())
        assert result.returncode == 1, result.stdout + output
        assert "no schema registry is configured" in output and "--registry" in output
        assert "Traceback" not in output
