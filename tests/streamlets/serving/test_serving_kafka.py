"""Serving on the real broker, with real TensorFlow and a real KServe model server."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import kafka_support as k
from tests.streamlets.serving import serving_support as s
from tests.waiting import wait_until


def test_live_switching_embedded_remote_v1_remote_v2_embedded_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels, model_server: Any
) -> None:
    n = 20_000
    app = k.app(kafka_bootstrap, 2, tmp_path / "cache")
    out_topic = support.topic(app, "predictions")
    v1 = wine_models.v1.keras_file.read_bytes()
    k.push(kafka_bootstrap, app, s.descriptor(1, "KERAS", data=v1))
    with support.replicas(app, tmp_path) as running:
        running.start("classifier", 0)
        running.start("classifier", 1)
        k.wait_until_serving(kafka_bootstrap, app, 1, 2)
        feeder = k.produce_paced(
            kafka_bootstrap, support.topic(app, "features"), k.features(wine_models, n), rate=1500
        )
        pushes = [
            (n // 5, s.descriptor(2, "TF_SERVING", location=model_server.url)),
            (2 * n // 5, s.descriptor(3, "OPEN_INFERENCE_V2", location=model_server.url)),
            (3 * n // 5, s.descriptor(4, "KERAS", data=wine_models.v2.keras_file.read_bytes())),
        ]
        for threshold, descriptor in pushes:
            support.consume_until(
                kafka_bootstrap, out_topic, support.count_at_least(threshold), timeout=120
            )
            k.push(kafka_bootstrap, app, descriptor)
        feeder.join(60)
        out = support.consume_until(
            kafka_bootstrap, out_topic, support.count_at_least(n), timeout=180
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("classifier"), lambda r: False, timeout=1
        )
        log = running.log()
    assert not dead, [dict(m.headers() or ()) for m in dead[:3]]
    codec = k.codec_of("examples.wine.WinePrediction")
    values = [codec.decode(m.value()) for m in out]
    assert sorted(int(v["id"][1:]) for v in values) == list(range(n)), log
    # per key, in the order written, the version never goes backwards
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for message, value in zip(out, values, strict=True):
        by_key[message.key()].append(value["model_version"])
    assert all(versions == sorted(versions) for versions in by_key.values())
    assert {v["model_version"] for v in values} == {1, 2, 3, 4}
    # the prediction matches the model the header names
    headers = [dict(m.headers() or ())["streamflow-model"].decode() for m in out]
    assert all(h == f"wine:{v['model_version']}" for h, v in zip(headers, values, strict=True))
    rows = np.array([int(v["id"][1:]) % len(wine_models.x) for v in values])
    expected = {
        1: wine_models.v1.model.predict(wine_models.x, verbose=0),
        2: wine_models.v2.model.predict(wine_models.x, verbose=0),
    }
    for value, row in zip(values, rows, strict=True):
        model = 2 if value["model_version"] == 4 else 1  # the server hosts version 1
        np.testing.assert_allclose(value["probabilities"], expected[model][row], atol=1e-4)


def _backpressure(port: int) -> float:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("streamflow_errors_total") and 'kind="backpressure"' in line
    )


def test_model_server_down_mid_stream_pauses_and_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels, model_server_factory: Any
) -> None:
    n = 3_000
    server = model_server_factory(
        model_path=wine_models.v1.keras_file, model_name="wine", model_version="1"
    )
    app = k.app(kafka_bootstrap, 1, tmp_path / "cache")
    out_topic = support.topic(app, "predictions")
    k.push(kafka_bootstrap, app, s.descriptor(1, "OPEN_INFERENCE_V2", location=server.url))
    with support.replicas(app, tmp_path) as running:
        replica = running.start("classifier", 0)
        k.wait_until_serving(kafka_bootstrap, app, 1, 1)
        feeder = k.produce_paced(
            kafka_bootstrap, support.topic(app, "features"), k.features(wine_models, n), rate=500
        )
        support.consume_until(kafka_bootstrap, out_topic, support.count_at_least(300), timeout=60)
        server.kill()
        down_since = time.monotonic()
        wait_until(
            lambda: _backpressure(replica.health_port) >= 2 and time.monotonic() - down_since >= 5,
            timeout=60,
            what="the replica to back off while the server is down",
        )
        server.restart()
        feeder.join(60)
        out = support.consume_until(
            kafka_bootstrap, out_topic, support.count_at_least(n), timeout=120
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("classifier"), lambda r: False, timeout=1
        )
        assert replica.restarts == 0, running.log()
    codec = k.codec_of("examples.wine.WinePrediction")
    ids = {codec.decode(m.value())["id"] for m in out}
    assert ids == {f"w{i}" for i in range(n)}
    assert not dead


def test_a_replica_started_after_the_last_push_serves_the_newest_model_first(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels
) -> None:
    # ONNX: which version a late replica serves first does not depend on the kind, and
    # an ONNX model spares the replica TensorFlow's import (most of its CPU)
    app = k.app(kafka_bootstrap, 1, tmp_path / "cache")
    k.push(
        kafka_bootstrap, app, s.descriptor(1, "ONNX", data=wine_models.v1.onnx_file.read_bytes())
    )
    k.push(
        kafka_bootstrap, app, s.descriptor(2, "ONNX", data=wine_models.v2.onnx_file.read_bytes())
    )
    support.produce(kafka_bootstrap, support.topic(app, "features"), k.features(wine_models, 200))
    with support.replicas(app, tmp_path) as running:
        running.start("classifier", 5)  # starts after both pushes, with data already waiting
        out = support.consume_until(
            kafka_bootstrap, support.topic(app, "predictions"), support.count_at_least(200)
        )
        log = running.log()
    codec = k.codec_of("examples.wine.WinePrediction")
    assert {codec.decode(m.value())["model_version"] for m in out} == {2}, log
    served = [st for st in k.statuses(kafka_bootstrap, app) if st["state"] == "serving"]
    assert [st["version"] for st in served] == [2]
