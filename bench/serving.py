"""Serving benchmarks: batching, remote concurrency, and how fast a new model takes over.

``python -m bench.serving`` measures, in one run on one broker and one model server:

* **embedded**: the wine classifier served by the streamlet with micro-batches of up to
  500 records, against the same streamlet with a batch size of 1, and the model's own
  ceiling (``model(x)`` on batches of the same sizes, no Kafka); the same again for a
  wider synthetic MLP (13 -> 3 x 256 relu -> 3), trained on random data here, whose
  model call costs ~100x the wine model's, so the model is a real part of the work;
* **remote**: the streamlet calling KServe's V2 endpoint (64 instances a request, 4 in
  flight), against the usual naive client: one synchronous HTTP request per record;
* **switch**: under a steady load, the time from producing a new descriptor to the first
  output of the new version, and whether any record was lost while it happened;
* **digits**: the digits example's CNN through its named-tensor mapping: batched against
  per record, embedded Keras against ONNX, remote V2 JSON against V2 binary
  (:mod:`bench.digits`).

Competitors run as the replica process a pod would run; the clock runs from the first
output to the N-th, read from the output topic's end offsets, not from sleeps.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from streamflow import devkit  # noqa: E402
from tests.model_fixtures import load_wine_trainer  # noqa: E402
from tests.runtime import support  # noqa: E402
from tests.streamlets.serving import kafka_support as k  # noqa: E402
from tests.streamlets.serving import serving_support as s  # noqa: E402


def end_offset(bootstrap: str, topic: str) -> int:
    """The sum of a topic's end offsets: how many records it holds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        )
    finally:
        consumer.close()


def time_outputs(
    bootstrap: str, topic: str, n: int, *, base: int = 0, timeout: float = 600
) -> float:
    """Seconds from the first output past ``base`` to the n-th (end offsets every 20 ms)."""
    deadline = time.monotonic() + timeout
    while end_offset(bootstrap, topic) <= base:
        if time.monotonic() > deadline:
            raise TimeoutError("no output at all")
        time.sleep(0.02)
    start = time.monotonic()
    first = end_offset(bootstrap, topic) - base
    while (done := end_offset(bootstrap, topic) - base) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done} of {n} outputs")
        time.sleep(0.02)
    return (time.monotonic() - start) / max(1, n - first) * n


def streamlet_rate(
    bootstrap: str, tmp: Path, descriptor: dict[str, Any], n: int, batch_size: int, models: Any
) -> float:
    app = k.app(bootstrap, 1, tmp / "cache")
    support.produce(bootstrap, support.topic(app, "features"), k.features(models, n))
    k.push(bootstrap, app, descriptor)
    with support.replicas(app, tmp) as running:
        running.start("classifier", extra_args=("--batch-size", str(batch_size)))
        seconds = time_outputs(bootstrap, support.topic(app, "predictions"), n)
    return n / seconds


def raw_rate(model: Any, x: np.ndarray, batch: int, n: int) -> float:
    import tensorflow as tf

    fn = tf.function(
        lambda t: model(t, training=False),
        input_signature=[tf.TensorSpec([None, x.shape[1]], tf.float32)],
    )
    fn(x[:batch])
    rows = np.resize(x, (n, x.shape[1])).astype(np.float32)
    started = time.perf_counter()
    for i in range(0, n, batch):
        fn(rows[i : i + batch])
    return n / (time.perf_counter() - started)


def naive_remote_rate(url: str, x: np.ndarray, n: int) -> float:
    rows = np.resize(x, (n, x.shape[1])).astype(np.float32)
    with httpx.Client() as client:
        started = time.perf_counter()
        for row in rows:
            response = client.post(
                f"{url}/v2/models/wine/infer",
                json={
                    "inputs": [
                        {
                            "name": "input",
                            "shape": [1, len(row)],
                            "datatype": "FP32",
                            "data": row.tolist(),
                        }
                    ]
                },
            )
            response.raise_for_status()
    return n / (time.perf_counter() - started)


def switch_time(bootstrap: str, tmp: Path, models: Any) -> dict[str, float]:
    app = k.app(bootstrap, 1, tmp / "cache")
    n = 20_000
    k.push(bootstrap, app, s.descriptor(1, "KERAS", data=models.v1.keras_file.read_bytes()))
    with support.replicas(app, tmp) as running:
        running.start("classifier")
        k.wait_until_serving(bootstrap, app, 1, 1)
        feeder = threading.Thread(
            target=support.produce,
            args=(bootstrap, support.topic(app, "features"), k.features(models, n)),
        )
        feeder.start()
        support.consume_until(
            bootstrap, support.topic(app, "predictions"), support.count_at_least(2_000), timeout=120
        )
        pushed = time.monotonic()
        k.push(bootstrap, app, s.descriptor(2, "KERAS", data=models.v2.keras_file.read_bytes()))
        codec = k.codec_of("examples.wine.WinePrediction")

        def new_version(records: list[Any]) -> bool:
            return any(codec.decode(m.value())["model_version"] == 2 for m in records[-500:])

        support.consume_until(
            bootstrap, support.topic(app, "predictions"), new_version, timeout=120
        )
        took = time.monotonic() - pushed
        feeder.join()
        out = support.consume_until(
            bootstrap, support.topic(app, "predictions"), support.count_at_least(n), timeout=300
        )
    ids = {codec.decode(m.value())["id"] for m in out}
    return {"push_to_first_new_output_s": took, "lost": float(n - len(ids))}


@contextlib.contextmanager
def model_server(models: Any) -> Iterator[str]:
    """KServe's ModelServer hosting wine v1 over V1 and V2 (tools/modelserver/.venv)."""
    server = devkit.ModelServer(model_path=models.v1.keras_file, model_name="wine")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@dataclasses.dataclass(frozen=True)
class _Version:
    keras_file: Path
    model: Any


def _wide_model(width: int, layers: int) -> Any:
    import keras

    inputs = keras.Input(shape=(13,), name="features", dtype="float32")
    hidden = inputs
    for index in range(layers):
        hidden = keras.layers.Dense(width, activation="relu", name=f"wide_{index}")(hidden)
    outputs = keras.layers.Dense(3, activation="softmax", name="probabilities")(hidden)
    return keras.Model(inputs, outputs, name="wide_mlp")


def train_wide(out: Path, *, width: int = 256, layers: int = 3) -> _Version:
    """A wider MLP with the wine model's ports, fitted for one epoch to random data.

    Only its cost matters: 13 -> 3 x 256 relu -> 3 softmax is ~135k multiply-adds a
    record, about 100x the wine model, so the model call is no longer free.
    """
    import keras
    import numpy as np

    keras.utils.set_random_seed(7)
    trained = _wide_model(width, layers)
    trained.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(7)
    trained.fit(rng.normal(size=(2048, 13)), rng.integers(0, 3, 2048), epochs=1, verbose=0)
    # An uncompiled copy: without Adam's state the descriptor stays under Kafka's 1 MB.
    bare = _wide_model(width, layers)
    bare.set_weights(trained.get_weights())
    out.mkdir(parents=True, exist_ok=True)
    keras_file = out / "wide-mlp.keras"
    bare.save(keras_file)
    return _Version(keras_file, bare)


class Models:
    """Both wine versions, trained here (as the test fixtures do), the data set, the wide MLP."""

    def __init__(self, out: Path) -> None:
        train = load_wine_trainer()
        versions = {}
        for version in (1, 2):
            model = train.train_model(version)
            keras_file, _ = train.export(model, out=out, version=version)
            versions[version] = _Version(keras_file, model)
        frame = train.load_wine_frame()
        self.x, self.y = frame.x, frame.y
        self.v1, self.v2 = versions[1], versions[2]
        self.wide = train_wide(out)


def _embedded(
    results: dict[str, Any], name: str, bootstrap: str, tmp: Path, models: Models, n: int
) -> None:
    """Batched, per-record and raw rates of one model, under ``name``."""
    version = models.v1 if name == "wine" else models.wide
    embedded = s.descriptor(1, "KERAS", data=version.keras_file.read_bytes())
    results[f"{name}_embedded_batched"] = streamlet_rate(bootstrap, tmp, embedded, n, 500, models)
    results[f"{name}_embedded_per_record"] = streamlet_rate(
        bootstrap, tmp, embedded, n // 10, 1, models
    )
    results[f"{name}_raw_batch_500"] = raw_rate(version.model, models.x, 500, n)
    results[f"{name}_raw_batch_1"] = raw_rate(version.model, models.x, 1, n // 10)


def run_scenario(bootstrap: str, tmp: Path, models: Models, url: str, n: int) -> dict[str, Any]:
    """Every serving measurement, once each, on a running broker and model server."""
    results: dict[str, Any] = {"records": n}
    for name in ("wine", "wide"):
        _embedded(results, name, bootstrap, tmp, models, n)
        _say(
            f"  embedded {name}: batched {results[f'{name}_embedded_batched']:,.0f} rec/s, "
            f"per record {results[f'{name}_embedded_per_record']:,.0f} rec/s"
        )
    remote = s.descriptor(1, "OPEN_INFERENCE_V2", location=url)
    results["remote_batched_v2"] = streamlet_rate(bootstrap, tmp, remote, n, 500, models)
    remote_v1 = s.descriptor(1, "TF_SERVING", location=url)
    results["remote_batched_v1"] = streamlet_rate(bootstrap, tmp, remote_v1, n, 500, models)
    results["remote_naive_sync"] = naive_remote_rate(url, models.x, n // 10)
    _say(
        f"  remote: V2 {results['remote_batched_v2']:,.0f}, V1 {results['remote_batched_v1']:,.0f}"
        f", naive sync {results['remote_naive_sync']:,.0f} rec/s"
    )
    results["switch"] = switch_time(bootstrap, tmp, models)
    _say(f"  switch: {results['switch']}")
    from bench import digits  # trains the digits CNN and starts its own model server

    results["digits"] = digits.run(bootstrap, tmp, n)
    _say(f"  digits: {json.dumps(results['digits']['ratios'])}")
    results["ratios"] = {
        **{
            f"{name}_embedded_batched_vs_per_record": results[f"{name}_embedded_batched"]
            / results[f"{name}_embedded_per_record"]
            for name in ("wine", "wide")
        },
        **{
            f"{name}_raw_batched_vs_per_record": results[f"{name}_raw_batch_500"]
            / results[f"{name}_raw_batch_1"]
            for name in ("wine", "wide")
        },
        "remote_batched_v2_vs_naive": results["remote_batched_v2"] / results["remote_naive_sync"],
        "remote_batched_v1_vs_naive": results["remote_batched_v1"] / results["remote_naive_sync"],
    }
    return results


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--bootstrap", default=os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP"))
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat()}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        models = Models(tmp / "models")
        with common.broker(args.bootstrap) as (bootstrap, _), model_server(models) as url:
            results |= run_scenario(bootstrap, tmp, models, url, args.records)
    out = ROOT / "bench" / "results" / f"serving-{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
