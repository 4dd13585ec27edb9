"""The registry wine example serving scikit-learn models, as a user meets it.

`streamflow run` on a copy of blueprints/wine/registry.yaml (renamed, so its
topics and subjects are this test's own; on the session's broker and registry,
with `register: auto`) starts with a LogisticRegression converted by skl2onnx
as skl2onnx does by default (a label and a ZipMap of probabilities). Then:

- another team registers a `WineFeatures` without `proline`: the registry
  refuses it, because the subject `run` created protects its consumer;
- `streamflow model push` switches, live, to the same model converted with
  ``zipmap=False``, then to a RandomForest in both forms; the blueprint's
  shorthand (`output_field`, `class_field`) is unchanged throughout;
- every prediction of every version is scikit-learn's `predict` (and
  `predict_proba`) on that wine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.running import CliRun
from tests.streamlets.serving.sklearn_models import (
    FEATURES_SCHEMA,
    WineSklearn,
    wine_sklearn,
)
from tests.waiting import wait_until

__all__ = ["wine_sklearn"]

ROOT = Path(__file__).resolve().parents[2]
WINE = ROOT / "blueprints" / "wine"
STREAMFLOW = Path(sys.executable).with_name("streamflow")
PER_VERSION = 60  # predictions of each version checked against scikit-learn
# (version, classifier, form): version 1 is pushed by the example's own publisher
PUSHED = [(2, "logistic", "tensors"), (3, "forest", "zipmap"), (4, "forest", "tensors")]


def renamed_registry_example(into: Path, models: WineSklearn) -> tuple[Path, str, dict[str, str]]:
    """``(copy, app name, {example topic: this copy's})``: the example with its own names,
    registering its schemas, starting on the default skl2onnx LogisticRegression."""
    spec: dict[str, Any] = yaml.safe_load((WINE / "registry.yaml").read_text())
    suffix = uuid.uuid4().hex[:8]
    topics = {topic: f"{topic}-{suffix}" for topic in spec["topics"]}
    spec["name"] = f"{spec['name']}-{suffix}"
    spec["topics"] = {topics[t]: body for t, body in spec["topics"].items()}
    spec["python_paths"] = [str(WINE)]
    spec["schemas"] = [str(ROOT / "schemas")]
    spec["kafka"] = {"register": "auto"}  # as `run` does with its own registry
    streamlets = spec["streamlets"]
    streamlets["samples"]["config"].update(dataset=str(models.samples), rate=50)
    streamlets["models"]["config"] = {
        "name": "wine",
        "version": 1,
        "onnx": str(models.models["logistic"].zipmap),
    }
    into.mkdir(parents=True, exist_ok=True)
    copy = into / "registry.yaml"
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    return copy, spec["name"], topics


class Predictions:
    """The predictions topic from its start, decoded with confluent-kafka's deserializer."""

    def __init__(self, bootstrap: str, topic: str, registry: SchemaRegistryClient) -> None:
        self.topic = topic
        self.by_version: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self._decode = AvroDeserializer(registry)
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"check-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([topic])

    def read(self) -> None:
        context = SerializationContext(self.topic, MessageField.VALUE)
        for msg in self._consumer.consume(500, 0.5):
            if msg.error() is None:
                value = self._decode(msg.value(), context)
                self.by_version[value["model_version"]].append(value)

    def has(self, version: int, count: int) -> bool:
        self.read()
        return len(self.by_version[version]) >= count

    def close(self) -> None:
        self._consumer.close()


def _env(home: Path) -> dict[str, str]:
    drop = ("STREAMFLOW_KAFKA_BOOTSTRAP", "STREAMFLOW_SCHEMA_REGISTRY_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(STREAMFLOW_HOME=str(home), NO_COLOR="1", COLUMNS="250")
    return env


@pytest.mark.timeout(600)
def test_skl2onnx_classifiers_serve_in_the_registry_example_and_its_subject_protects_it(
    wine_sklearn: WineSklearn, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    copy, app, topics = renamed_registry_example(tmp_path / "project", wine_sklearn)
    env = _env(tmp_path / "home")
    run = CliRun(
        ["run", str(copy), "-b", kafka_bootstrap, "--registry", schema_registry_url],
        env=env,
        log_file=tmp_path / "run.log",
    )
    registry = SchemaRegistryClient({"url": schema_registry_url})
    predictions = Predictions(kafka_bootstrap, topics["wine-predictions"], registry)
    try:
        wait_until(
            lambda: predictions.has(1, PER_VERSION),
            what=f"{PER_VERSION} predictions by wine:1",
            timeout=240,
            interval=0.5,
            explain=lambda: run.log()[-6000:],
        )

        # another team's producer drops `proline`, which the classifier needs: refused
        subject = f"{topics['wine-features']}-value"
        assert registry.get_compatibility(subject) == "FORWARD_TRANSITIVE"
        features = json.loads(FEATURES_SCHEMA.read_text())
        without = {**features, "fields": [f for f in features["fields"] if f["name"] != "proline"]}
        with pytest.raises(SchemaRegistryError) as refused:
            registry.register_schema(subject, Schema(json.dumps(without), "AVRO"))
        assert refused.value.http_status_code == 409, refused.value
        assert "proline" in str(refused.value)

        for version, name, form in PUSHED:
            artifact = getattr(wine_sklearn.models[name], form)
            push = subprocess.run(
                [
                    str(STREAMFLOW), "model", "push", app, "classifier", "--onnx", str(artifact),
                    "-b", kafka_bootstrap, "--registry", schema_registry_url,
                ],
                env=env, capture_output=True, text=True, timeout=180, check=False,
            )  # fmt: skip
            assert push.returncode == 0, push.stdout + push.stderr + run.log()[-4000:]
            assert f"pushed wine:{version} (ONNX" in push.stdout, push.stdout
            wait_until(
                lambda version=version: predictions.has(version, PER_VERSION),  # type: ignore[misc]
                what=f"{PER_VERSION} predictions by wine:{version}",
                timeout=180,
                interval=0.5,
                explain=lambda: run.log()[-6000:],
            )
        log = run.interrupt(timeout=90)
    finally:
        predictions.close()
        run.close()
    assert "replica failed" not in log and "exited with code" not in log, log[-5000:]

    classifiers = {1: "logistic", **{v: name for v, name, _ in PUSHED}}
    for version, name in classifiers.items():
        served = predictions.by_version[version]
        estimator = wine_sklearn.models[name].estimator
        rows = np.stack([wine_sklearn.row(p["id"]) for p in served])
        assert [p["predicted"] for p in served] == estimator.predict(rows).tolist(), version
        assert {p["predicted"] for p in served} == {0, 1, 2}, version
        np.testing.assert_allclose(
            [p["probabilities"] for p in served], estimator.predict_proba(rows), atol=1e-5
        )
