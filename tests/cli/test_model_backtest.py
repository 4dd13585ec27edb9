"""`streamflow model rollout backtest`: recorded input served by both versions, offline.

On the real broker: a copy of the wine classifier's blueprint, version 1 pushed as the
stable model, 300 wines written to its input topic by another producer. The backtest
serves them with version 1 and with the worse version 3, through the serving
streamlet's own logic, and what it finds is what Keras itself says of those wines;
run twice, it writes the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

from streamflow import devkit
from streamflow.blueprint import load_application
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s
from tests.web import wine

STREAMFLOW = Path(sys.executable).with_name("streamflow")
N = 300


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STREAMFLOW), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_a_backtest_serves_recorded_input_with_both_versions_and_says_the_same_twice(
    kafka_bootstrap: str, wine_models: WineModels, tmp_path: Path
) -> None:
    copy, _, topics = wine.renamed_copy(
        s.WINE / "classifier.yaml", into=tmp_path / "project", models=wine_models.dir
    )
    features, control = topics["wine-features"], topics["wine-models"]
    for topic, partitions in ((features, 3), (control, 1)):
        devkit.create_topic(bootstrap_servers=kafka_bootstrap, name=topic, partitions=partitions)
    env = {**os.environ, "STREAMFLOW_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    env["COLUMNS"] = "200"
    pushed = _cli(
        env, "model", "push", str(copy), "classifier", "--onnx", str(wine_models.v1.onnx_file),
        "--name", "wine",
        "-b", kafka_bootstrap, "--timeout", "0",
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    app = load_application(copy)
    codec = Codecs(app, SchemaStore(app.schema_paths)).for_topic(
        app.topics[features], "examples.wine.WineFeatures", producing=True
    )
    rows: list[dict[str, Any]] = []
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(N):
        row = {f: float(wine_models.x[i % 178][j]) for j, f in enumerate(s.FEATURES)}
        rows.append({"id": f"w{i}", **row, "label": int(wine_models.y[i % 178])})
        producer.produce(features, codec.encode(rows[-1]), f"w{i}".encode())
    assert producer.flush(30) == 0

    def backtest(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return _cli(
            env, "model", "rollout", "backtest", str(copy), "classifier",
            "--onnx", str(wine_models[3].onnx_file), "-b", kafka_bootstrap, "--out", str(out),
            *extra,
        )  # fmt: skip

    first = backtest(tmp_path / "one")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "read 300 records of" in first.stderr + first.stdout
    report = json.loads((tmp_path / "one" / "report.json").read_text())
    stable, candidate = report["versions"]["stable"], report["versions"]["candidate"]
    assert (stable["model"], candidate["model"]) == ("wine:1", "wine:2")
    assert stable["served"] == candidate["served"] == N and stable["dead_letters"] == 0

    # what Keras itself says of the same wines
    x = np.array([[r[f] for f in s.FEATURES] for r in rows], dtype=np.float32)
    y = np.array([r["label"] for r in rows])
    keras_says = {
        v: float(np.mean(np.argmax(wine_models[v].model.predict(x, verbose=0), axis=1) == y))
        for v in (1, 3)
    }
    assert stable["accuracy"] == keras_says[1] > 0.9
    assert candidate["accuracy"] == keras_says[3] < 0.8
    assert report["agreement"] < 1.0 and report["compared"] == N

    # each output line is the record it came from, in the topic's order
    lines = [
        json.loads(line) for line in (tmp_path / "one" / "stable.jsonl").read_text().splitlines()
    ]
    assert len(lines) == N and all("latency_ms" not in line["output"] for line in lines)
    by_key = {line["key"]: line for line in lines}
    assert {line["output"]["id"] for line in lines} == {r["id"] for r in rows}
    assert all(line["output"]["id"] == key for key, line in by_key.items())

    again = backtest(tmp_path / "two")
    assert again.returncode == 0, again.stdout + again.stderr
    for name in ("stable.jsonl", "candidate.jsonl", "report.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()

    # a range with nothing in it says so
    empty = backtest(tmp_path / "three", "--from", "2099-01-01T00:00:00")
    assert empty.returncode == 1 and "no record of" in empty.stderr + empty.stdout
