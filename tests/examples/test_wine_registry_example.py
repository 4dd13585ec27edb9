"""The registry example as the README runs it: `streamflow run blueprints/wine/registry.yaml`.

No broker and no registry are configured, so `run` starts both (the devkit's
Kafka and Apicurio) and registers the ports' schemas itself. While it runs, a
user's second terminal reads its predictions with `streamflow tail` (decoded,
with the schema id) and with confluent-kafka's own `AvroDeserializer`, which
knows nothing of streamflow: what the example writes is what any Confluent
client reads.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.model_fixtures import WineModels

ROOT = Path(__file__).resolve().parents[2]
BLUEPRINT = ROOT / "blueprints" / "wine" / "registry.yaml"
STREAMFLOW = Path(sys.executable).with_name("streamflow")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MAGIC = 0


def _env(home: Path) -> dict[str, str]:
    drop = ("STREAMFLOW_KAFKA_BOOTSTRAP", "STREAMFLOW_SCHEMA_REGISTRY_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(STREAMFLOW_HOME=str(home), NO_COLOR="1", COLUMNS="250", TF_CPP_MIN_LOG_LEVEL="2")
    return env


def _wait_for(condition: Any, *, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-5000:]}")


def _predictions_logged(log: Path, at_least: int) -> bool:
    counts = re.findall(r"accuracy: .*?wine:1 [\d.]+% of (\d+)", ANSI.sub("", log.read_text()))
    return bool(counts) and int(counts[-1]) >= at_least


def test_the_registry_example_runs_and_any_confluent_client_reads_its_predictions(
    wine_models: WineModels, tmp_path: Path
) -> None:
    home, log = tmp_path / "home", tmp_path / "run.log"
    env = _env(home)
    with log.open("w") as out:
        run = subprocess.Popen(
            [
                str(STREAMFLOW), "run", str(BLUEPRINT), "--for", "240s",
                "--set", f"samples.dataset={wine_models.samples}",
                "--set", f"models.keras={wine_models.v1.keras_file}",
            ],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_for(
            lambda: _predictions_logged(log, 200) or run.poll() is not None,
            timeout=200,
            what="200 predictions by wine:1",
            log=log,
        )
        assert run.poll() is None, log.read_text()[-5000:]
        text = ANSI.sub("", log.read_text())
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

        # confluent-kafka's own deserializer, pointed where the app says its Kafka and registry are
        runtime = json.loads((home / "apps" / "wine-registry" / "runtime.json").read_text())
        spec = json.loads((home / "apps" / "wine-registry" / "app.json").read_text())
        registry_url = spec["kafka"]["schema_registry"]
        deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
        consumer = Consumer(
            {
                "bootstrap.servers": runtime["bootstrap"],
                "group.id": f"confluent-reader-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe(["wine-predictions"])
            read: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while len(read) < 100 and time.monotonic() < deadline:
                for msg in consumer.consume(100, 1.0):
                    if msg.error() is not None:
                        continue
                    raw = msg.value()
                    assert raw is not None and raw[0] == _MAGIC, raw
                    context = SerializationContext("wine-predictions", MessageField.VALUE)
                    read.append(deserialize(raw, context))
        finally:
            consumer.close()
        assert len(read) >= 100, f"only {len(read)} predictions read"
        assert all(r["model"] == "wine" and r["model_version"] == 1 for r in read)
        assert {r["predicted"] for r in read} <= {0, 1, 2}
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    text = ANSI.sub("", log.read_text())
    assert run.returncode == 0, text[-5000:]
    assert "replica failed" not in text and "exited with code" not in text, text[-5000:]
    assert "stopping the embedded schema registry" in text
    assert text.rstrip().endswith("streamflow: stopped"), text[-3000:]
