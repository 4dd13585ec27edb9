"""Serving benchmarks for the digits CNN: named image tensors through the streamlet.

Part of ``python -m bench serving``. The model is blueprints/digits' CNN (an 8x8x1
``image`` in, ten ``probabilities`` out), trained here by the example's own
``train.py``, and the streamlet is the example's ``DigitBytesClassifier`` with the
tensor mapping of ``classifier-bytes.yaml`` (``pixels`` -> ``image`` float32
[8, 8, 1]; scores, argmax and a labelled top 3 out). The measurements:

* **batched / per record**: the runtime's batches (up to 500) against a batch of 1;
* **Keras / ONNX**: the same weights embedded as ``KERAS`` and as ``ONNX`` (the
  example's hand-built graph, run by onnxruntime), both batched and per record,
  with the raw ``model(x)`` and ``session.run`` on batches of 64 (and 1) as the
  models' own ceilings;
* **V2 JSON / V2 binary**: the streamlet calling KServe's V2 ``/infer`` with JSON
  numbers, and with the binary tensor extension (``binary: "true"``), and the
  bytes of one request of ``remote_batch_size`` images in each;
* **input form**: one batched Keras run reads the example's default form, the
  pixels as nested 8x8x1 Avro arrays (``classifier.yaml``), to show what the
  raw-bytes form saves.

One replica runs for each (input form, batch size) for the whole scenario, as a pod
would, and each measurement is a segment: the model is pushed live as a newer
descriptor, and once the replica says it serves it, the segment's images are
committed in one transaction and timed from the first output to the last. The
segments are interleaved: every configuration once per round, in reverse order in
every other round, and each ratio is the median over rounds of the two segments of
the same round, so a shared machine's drift falls on both sides of a ratio. Each
segment also records the replica's CPU per record, which a busy machine distorts less
than the rate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import common, scaleout, serving
from streamflow import devkit
from streamflow.blueprint.model import Application
from streamflow.models import wire
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.examples.example_models import DIGITS, load_trainer
from tests.examples.support import blueprint_config
from tests.runtime import support
from tests.streamlets.serving import serving_support as s

SCHEMAS = DIGITS.parents[1] / "schemas" / "examples" / "digits"
REMOTE_BATCH = 64  # the streamlet's remote_batch_size, and the raw models' batch

# (name, kind, batch size, input form, remote parameters), one run each per round
CONFIGS: list[tuple[str, str, int, str, dict[str, str]]] = [
    ("keras_batched", "KERAS", 500, "bytes", {}),
    ("keras_per_record", "KERAS", 1, "bytes", {}),
    ("onnx_batched", "ONNX", 500, "bytes", {}),
    ("onnx_per_record", "ONNX", 1, "bytes", {}),
    ("keras_batched_nested", "KERAS", 500, "nested", {}),
    ("v2_json", wire.V2, 500, "bytes", {}),
    ("v2_binary", wire.V2, 500, "bytes", {"binary": "true"}),
]
# each ratio: (numerator run, denominator run)
RATIOS = {
    "keras_batched_vs_per_record": ("keras_batched", "keras_per_record"),
    "onnx_batched_vs_per_record": ("onnx_batched", "onnx_per_record"),
    "onnx_vs_keras_batched": ("onnx_batched", "keras_batched"),
    "onnx_vs_keras_per_record": ("onnx_per_record", "keras_per_record"),
    "bytes_vs_nested_input": ("keras_batched", "keras_batched_nested"),
    "v2_binary_vs_json": ("v2_binary", "v2_json"),
}


@dataclasses.dataclass(frozen=True)
class DigitsModels:
    """Version 1 of the example's CNN as ``.keras`` and ``.onnx``, and the data set."""

    keras_file: Path
    onnx_file: Path
    model: Any  # keras.Model
    description: str
    x: np.ndarray  # float32 [1797, 8, 8, 1]
    y: np.ndarray


def train(out: Path) -> DigitsModels:
    """The example's own train.py: version 1, exported as Keras and (checked) ONNX."""
    trainer = load_trainer(DIGITS)
    frame = trainer.load_digits_frame()
    model = trainer.train_model(1)
    keras_file, _ = trainer.export(model, out=out, version=1)
    onnx_file = trainer.export_onnx(model, out=out, version=1, check=frame)
    spec = trainer.VERSIONS[1]
    about = f"8x8x1 -> conv {spec.filters} -> max-pool -> dense {spec.dense} -> 10"
    return DigitsModels(keras_file, onnx_file, model, about, frame.x, frame.y)


@contextlib.contextmanager
def model_server(models: DigitsModels) -> Iterator[str]:
    """KServe's ModelServer hosting the digits ``.keras`` model as ``digits``."""
    server = devkit.ModelServer(model_path=models.keras_file, model_name="digits")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


# -- the streamlet -----------------------------------------------------------------------


def _app(bootstrap: str, cache: Path, form: str) -> Application:
    blueprint, cls = {
        "bytes": ("classifier-bytes.yaml", "DigitBytesClassifier"),
        "nested": ("classifier.yaml", "DigitClassifier"),
    }[form]
    config = blueprint_config(DIGITS / blueprint, "classifier")
    return support.make_app(
        bootstrap,
        streamlets={
            "classifier": {
                "class": f"digits_app:{cls}",
                "replicas": 1,
                "config": {**config, "cache_dir": str(cache)},
            }
        },
        topics={
            "images": {"consumers": ["classifier.in"], "partitions": 4},
            "models": {"consumers": ["classifier.model"], "config": {"cleanup.policy": "compact"}},
            "predictions": {"producers": ["classifier.out"], "partitions": 4},
            "status": {"producers": ["classifier.status"]},
        },
        schema_paths=[SCHEMAS],
        python_paths=[DIGITS],
    )


def _codec(name: str) -> SingleObjectCodec:
    store = SchemaStore([SCHEMAS])
    return SingleObjectCodec(store.get(name), store=store)


def images(models: DigitsModels, n: int, form: str) -> list[tuple[str, bytes]]:
    """n encoded image records, cycling through the data set, keyed over 200 keys."""
    codec = _codec("examples.digits." + ("DigitImageBytes" if form == "bytes" else "DigitImage"))
    out = []
    for i in range(n):
        row = i % len(models.y)
        image = models.x[row]
        pixels = image.astype("<f4").tobytes() if form == "bytes" else image.tolist()
        value = {"id": f"d{i}", "pixels": pixels, "label": int(models.y[row])}
        out.append((f"k{i % 200}", codec.encode(value)))
    return out


def _push(bootstrap: str, app: Application, descriptor: dict[str, Any]) -> None:
    codec = _codec("streamflow.ml.ModelDescriptor")
    support.produce(bootstrap, support.topic(app, "models"), [("digits", codec.encode(descriptor))])


def descriptor(kind: str, models: DigitsModels, url: str, parameters: dict[str, str]) -> Any:
    if kind == wire.V2:
        return s.descriptor(
            1, kind, location=url, sha256=None, parameters=parameters, name="digits"
        )
    path = models.onnx_file if kind == "ONNX" else models.keras_file
    return s.descriptor(1, kind, data=path.read_bytes(), name="digits")


class Replica:
    """One long-running replica of one app; each segment is timed under a model pushed live.

    The replica keeps running between segments, as a pod would: a new model comes as
    a newer descriptor on the control topic and is loaded off the hot path, and the
    segment's images are written inside one transaction, so they all become visible
    at its commit and the replica reads a backlog, not the driver's producing.
    """

    def __init__(self, bootstrap: str, app: Application, process: Any) -> None:
        self.bootstrap = bootstrap
        self.app = app
        self.process = process  # the ReplicaProcess
        self.version = 0

    def serve(self, desc: dict[str, Any], *, timeout: float = 120) -> None:
        """Push ``desc`` as the next version and wait until this replica serves it."""
        self.version += 1
        desc = {**desc, "version": self.version, "description": f"bench v{self.version}"}
        _push(self.bootstrap, self.app, desc)
        codec = _codec("streamflow.ml.ModelStatus")
        version = self.version

        def settled(records: list[Any]) -> bool:
            states = [codec.decode(m.value()) for m in records]
            return any(v["version"] == version and v["state"] != "loading" for v in states)

        records = support.consume_until(
            self.bootstrap, support.topic(self.app, "status"), settled, timeout=timeout
        )
        final = [codec.decode(m.value()) for m in records]
        final = [v for v in final if v["version"] == version and v["state"] != "loading"]
        if not final or final[-1]["state"] != "serving":
            raise RuntimeError(f"digits v{version} did not load: {final or 'no status'}")

    def rate(self, inputs: list[tuple[str, bytes]]) -> dict[str, float]:
        """Records/s over one segment, from its first output to its last, and CPU per record.

        The CPU is the replica's own (all its threads), from the commit to the last output.
        """
        topic = support.topic(self.app, "predictions")
        base = serving.end_offset(self.bootstrap, topic)
        gate = scaleout.gated_input(
            self.bootstrap,
            support.topic(self.app, "images"),
            ((key.encode(), value) for key, value in inputs),
        )
        cpu = common.cpu_of(self.process.pid)
        gate.commit_transaction(60)
        seconds = serving.time_outputs(self.bootstrap, topic, len(inputs), base=base, timeout=300)
        used = common.cpu_of(self.process.pid) - cpu
        return {
            "records_per_s": len(inputs) / seconds,
            "cpu_us_per_record": used * 1e6 / len(inputs),
        }


@contextlib.contextmanager
def replicas(bootstrap: str, tmp: Path) -> Iterator[dict[tuple[str, int], Replica]]:
    """A running replica for each (input form, batch size) that CONFIGS names."""
    with contextlib.ExitStack() as stack:
        started = {}
        for form, batch in dict.fromkeys((c[3], c[2]) for c in CONFIGS):
            where = tmp / f"digits-{form}-{batch}"
            where.mkdir(parents=True, exist_ok=True)
            app = _app(bootstrap, where / "cache", form)
            running = stack.enter_context(support.replicas(app, where))
            process = running.start("classifier", extra_args=("--batch-size", str(batch)))
            started[(form, batch)] = Replica(bootstrap, app, process)
        yield started


# -- the models on their own, and the wire -----------------------------------------------


def raw_keras_rate(model: Any, x: np.ndarray, batch: int, calls: int) -> float:
    """``model(x)`` in a tf.function with a dynamic batch, as the streamlet traces it."""
    import tensorflow as tf

    fn = tf.function(
        lambda t: model(t, training=False),
        input_signature=[tf.TensorSpec([None, *x.shape[1:]], tf.float32)],
    )
    rows = np.resize(x, (batch * calls, *x.shape[1:])).astype(np.float32)
    fn(rows[:batch])
    started = time.perf_counter()
    for i in range(0, len(rows), batch):
        fn(rows[i : i + batch])
    return len(rows) / (time.perf_counter() - started)


def raw_onnx_rate(onnx_file: Path, x: np.ndarray, batch: int, calls: int) -> float:
    """``session.run`` with the session options the streamlet uses (one intra-op thread)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        onnx_file.read_bytes(), sess_options=options, providers=["CPUExecutionProvider"]
    )
    rows = np.resize(x, (batch * calls, *x.shape[1:])).astype(np.float32)
    session.run(None, {"image": rows[:batch]})
    started = time.perf_counter()
    for i in range(0, len(rows), batch):
        session.run(None, {"image": rows[i : i + batch]})
    return len(rows) / (time.perf_counter() - started)


def payload_bytes(url: str, x: np.ndarray) -> dict[str, dict[str, int]]:
    """Bytes of one V2 request of REMOTE_BATCH images, and of its answer, JSON and binary."""
    batch = {"image": np.ascontiguousarray(x[:REMOTE_BATCH], dtype=np.float32)}
    sizes: dict[str, dict[str, int]] = {}
    for name, binary in (("v2_json", False), ("v2_binary", True)):
        body, headers = wire.encode_request(wire.V2, batch, binary=binary)
        response = httpx.post(
            f"{url}/v2/models/digits/infer", content=body, headers=headers, timeout=30
        )
        response.raise_for_status()
        sizes[name] = {"request": len(body), "response": len(response.content)}
    return sizes


# -- the scenario ------------------------------------------------------------------------


def sizes(n: int) -> dict[str, int]:
    """Records per run: batched runs n/4, per-record runs n/20, remote runs n/10."""
    return {"batched": n // 4, "per_record": n // 20, "remote": n // 10}


def run(bootstrap: str, tmp: Path, n: int, *, rounds: int = 2) -> dict[str, Any]:
    """Every digits measurement: ``rounds`` interleaved rounds of every configuration."""
    started = time.monotonic()
    models = train(tmp / "digits-models")
    counts = sizes(n)
    inputs: dict[tuple[str, int], list[tuple[str, bytes]]] = {}
    runs: list[dict[str, Any]] = []
    with model_server(models) as url, replicas(bootstrap, tmp) as running:
        for round_ in range(rounds):
            order = CONFIGS if round_ % 2 == 0 else CONFIGS[::-1]
            for name, kind, batch, form, parameters in order:
                count = counts[
                    "remote" if kind == wire.V2 else "batched" if batch > 1 else "per_record"
                ]
                if (form, count) not in inputs:
                    inputs[(form, count)] = images(models, count, form)
                replica = running[(form, batch)]
                replica.serve(descriptor(kind, models, url, parameters))
                load = os.getloadavg()[0]
                measured = replica.rate(inputs[(form, count)])
                runs.append(
                    {
                        "round": round_,
                        "config": name,
                        "kind": kind,
                        "batch_size": batch,
                        "input": form,
                        "records": count,
                        **measured,
                        "load_1m": load,
                    }
                )
                _say(
                    f"  digits round {round_ + 1}, {name}: {measured['records_per_s']:,.0f} rec/s, "
                    f"{measured['cpu_us_per_record']:,.0f} us CPU a record (load {load:.1f})"
                )
        payloads = payload_bytes(url, models.x)
    raw = {
        "keras_batch_64": raw_keras_rate(models.model, models.x, REMOTE_BATCH, 500),
        "onnx_batch_64": raw_onnx_rate(models.onnx_file, models.x, REMOTE_BATCH, 500),
        "keras_batch_1": raw_keras_rate(models.model, models.x, 1, 2_000),
        "onnx_batch_1": raw_onnx_rate(models.onnx_file, models.x, 1, 2_000),
    }
    result = summarise(models, runs, raw, payloads, counts, rounds)
    result["duration_s"] = round(time.monotonic() - started)  # training and servers included
    return result


def summarise(
    models: DigitsModels,
    runs: list[dict[str, Any]],
    raw: dict[str, float],
    payloads: dict[str, dict[str, int]],
    counts: dict[str, int],
    rounds: int,
) -> dict[str, Any]:
    """Median rate per configuration, and each ratio paired by round, then the median."""
    by_round = {(r["config"], r["round"]): r["records_per_s"] for r in runs}
    rates, cpu = {}, {}
    for name, *_ in CONFIGS:
        mine = [r for r in runs if r["config"] == name]
        rates[name] = _stats([r["records_per_s"] for r in mine])
        cpu[name] = _stats([r["cpu_us_per_record"] for r in mine])
    ratios = {
        key: statistics.median(
            by_round[(top, r)] / by_round[(bottom, r)]
            for r in range(rounds)
            if (top, r) in by_round and (bottom, r) in by_round
        )
        for key, (top, bottom) in RATIOS.items()
    }
    ratios["raw_onnx_vs_keras_batch_64"] = raw["onnx_batch_64"] / raw["keras_batch_64"]
    ratios["raw_onnx_vs_keras_batch_1"] = raw["onnx_batch_1"] / raw["keras_batch_1"]
    ratios["v2_json_vs_binary_request_bytes"] = (
        payloads["v2_json"]["request"] / payloads["v2_binary"]["request"]
    )
    loads = [r["load_1m"] for r in runs]
    return {
        "model": f"blueprints/digits CNN v1 ({models.description})",
        "records": counts,
        "rounds": rounds,
        "remote_batch_size": REMOTE_BATCH,
        "runs": runs,
        "rates": rates,
        "cpu_us_per_record": cpu,
        "raw": raw,
        "payload_bytes": payloads,
        "ratios": ratios,
        "load_1m": {"min": min(loads), "max": max(loads)},
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
