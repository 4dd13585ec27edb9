"""The registry example as the README runs it: `streamflow run blueprints/wine/registry.yaml`.

No broker and no registry are configured, so `run` starts both (the devkit's
Kafka and Apicurio) and registers the ports' schemas itself. While it runs, a
user's second terminal reads its predictions with `streamflow tail` (decoded,
with the schema id), writes wines of its own into the features topic with
confluent-kafka's `AvroSerializer` (another team's producer, which knows
nothing of streamflow), and reads every prediction back with confluent-kafka's
`AvroDeserializer`: the example reads and writes what any Confluent client does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.model_fixtures import WineModels
from tests.running import CliRun

ROOT = Path(__file__).resolve().parents[2]
BLUEPRINT = ROOT / "blueprints" / "wine" / "registry.yaml"
FEATURES_SCHEMA = ROOT / "schemas" / "examples" / "wine" / "WineFeatures.avsc"
EXTERNAL = 25  # wines written by a plain confluent-kafka producer
STREAMFLOW = Path(sys.executable).with_name("streamflow")
_MAGIC = 0


def _env(home: Path) -> dict[str, str]:
    drop = ("STREAMFLOW_KAFKA_BOOTSTRAP", "STREAMFLOW_SCHEMA_REGISTRY_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(STREAMFLOW_HOME=str(home), NO_COLOR="1", COLUMNS="250", TF_CPP_MIN_LOG_LEVEL="2")
    return env


def _predictions_logged(log: str, at_least: int) -> bool:
    counts = re.findall(r"accuracy: .*?wine:1 [\d.]+% of (\d+)", log)
    return bool(counts) and int(counts[-1]) >= at_least


def test_the_registry_example_runs_and_any_confluent_client_reads_its_predictions(
    wine_models: WineModels, tmp_path: Path
) -> None:
    home, log = tmp_path / "home", tmp_path / "run.log"
    env = _env(home)
    run = CliRun(
        [
            "run", str(BLUEPRINT),
            "--set", f"samples.dataset={wine_models.samples}",
            "--set", f"models.keras={wine_models.v1.keras_file}",
        ],
        env=env, log_file=log,
    )  # fmt: skip
    try:
        run.wait(
            lambda text: _predictions_logged(text, 200),
            what="200 predictions by wine:1",
            timeout=200,
        )
        text = run.log()
        assert "embedded schema registry ready at http://127.0.0.1:" in text

        # a second terminal: tail shows the records decoded, with their schema id
        tail = subprocess.run(
            [str(STREAMFLOW), "tail", "wine-registry", "wine-predictions", "-n", "5", "-o", "json"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert tail.returncode == 0, tail.stdout + tail.stderr
        records = [json.loads(line) for line in tail.stdout.splitlines() if line.strip()]
        assert len(records) == 5, tail.stdout
        ids = {r["schema_id"] for r in records}
        assert len(ids) == 1 and isinstance(ids.pop(), int), records
        assert all(r["value"]["model"] == "wine" and "predicted" in r["value"] for r in records)

        # another team's producer: confluent-kafka's serializer, the registered schema
        runtime = json.loads((home / "apps" / "wine-registry" / "runtime.json").read_text())
        spec = json.loads((home / "apps" / "wine-registry" / "app.json").read_text())
        bootstrap, registry = (
            runtime["bootstrap"],
            SchemaRegistryClient({"url": spec["kafka"]["schema_registry"]}),
        )
        serialize = AvroSerializer(
            registry,
            FEATURES_SCHEMA.read_text(),
            conf={"auto.register.schemas": False, "use.latest.version": True},
        )
        samples = [json.loads(line) for line in wine_models.samples.read_text().splitlines()]
        producer = Producer({"bootstrap.servers": bootstrap})
        features = SerializationContext("wine-features", MessageField.VALUE)
        for n, sample in enumerate(samples[:EXTERNAL]):
            wine = {**sample, "id": f"external-{n}"}
            producer.produce("wine-features", serialize(wine, features), wine["id"].encode())
        assert producer.flush(30) == 0

        # ... and a consumer with confluent-kafka's deserializer reads every prediction
        deserialize = AvroDeserializer(registry)
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"confluent-reader-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        read: list[dict[str, Any]] = []
        predictions = SerializationContext("wine-predictions", MessageField.VALUE)

        def external_seen() -> set[str]:
            return {r["id"] for r in read if r["id"].startswith("external-")}

        try:
            consumer.subscribe(["wine-predictions"])
            deadline = time.monotonic() + 120
            while len(external_seen()) < EXTERNAL and time.monotonic() < deadline:
                for msg in consumer.consume(200, 1.0):
                    if msg.error() is not None:
                        continue
                    raw = msg.value()
                    assert raw is not None and raw[0] == _MAGIC, raw
                    read.append(deserialize(raw, predictions))
        finally:
            consumer.close()
        assert external_seen() == {f"external-{n}" for n in range(EXTERNAL)}, len(read)
        assert all(r["model"] == "wine" and r["model_version"] == 1 for r in read)
        assert {r["predicted"] for r in read} <= {0, 1, 2}
        text = run.interrupt(timeout=90)
    finally:
        run.close()
    assert "replica failed" not in text and "exited with code" not in text, text[-5000:]
    assert "stopping the embedded schema registry" in text
    assert text.rstrip().endswith("streamflow: stopped"), text[-3000:]
