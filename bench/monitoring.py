"""Monitoring throughput: the drift and explanation streamlets against serving, in one run.

``python -m bench.monitoring [--records N] [--bootstrap ...]``

One broker and one topic of N wine measurements (4 partitions, filled once).
Each competitor is a replica process, as a pod runs it, reading all of that
topic from the start with its own consumer group, alone on the machine:

* ``serving``: the wine classifier (embedded Keras, micro-batches), which also
  writes the predictions the drift detector reads;
* ``drift``: KS and PSI on 13 features per window of 500 inputs, chi-squared and
  KS on the predictions, river's ADWIN and Page-Hinkley per prediction (it reads
  N inputs and N predictions: 2N records);
* ``explain``: integrated gradients (64 steps) for 5% of the records, and for
  every record; SHAP's KernelExplainer for 5% (1 s budget per batch), and for every
  record with a 250 ms budget, which it meets by shedding (``shed``: counted as
  ``streamflow_records_skipped_total{reason="budget"}``).

The clock runs from the first batch the replica counts on its ``/metrics``
(``streamflow_records_in_total``) to the batch that completes its inputs,
polled every 20 ms, so start-up, model loading and the group join are not
counted. Throughput is model inputs per second; the ratio is to serving's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from streamflow.blueprint.model import Application  # noqa: E402
from streamflow.runtime.clients import KafkaClients  # noqa: E402
from streamflow.runtime.topics import ensure_topics  # noqa: E402
from tests.model_fixtures import load_wine_trainer  # noqa: E402
from tests.runtime import support  # noqa: E402
from tests.streamlets.serving import serving_support as s  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FEATURES_TOPIC = "bench-wine-features"
MODELS_TOPIC = "bench-wine-models"
PREDICTIONS_TOPIC = "bench-wine-predictions"

COMPETITORS: dict[str, tuple[str, dict[str, Any]]] = {
    "serving": ("classifier_app:WineClassifier", {**s.CONFIG}),
    "drift": (
        "monitoring_app:WineDrift",
        {"numeric": s.FEATURES, "window": 500, "reference_size": 1000},
    ),
    "explain-ig-5%": (
        "monitoring_app:WineExplainer",
        {"input_fields": s.FEATURES, "sample_rate": 0.05, "steps": 64},
    ),
    "explain-ig-100%": (
        "monitoring_app:WineExplainer",
        {"input_fields": s.FEATURES, "sample_rate": 1.0, "steps": 64, "budget": "60s"},
    ),
    "explain-kernel-5%": (
        "monitoring_app:WineExplainer",
        {"input_fields": s.FEATURES, "sample_rate": 0.05, "method": "shap-kernel"},
    ),
    "explain-kernel-100%-250ms": (
        "monitoring_app:WineExplainer",
        {
            "input_fields": s.FEATURES,
            "sample_rate": 1.0,
            "method": "shap-kernel",
            "budget": "250ms",
        },
    ),
}


def _application(bootstrap: str, name: str, cls: str, config: dict[str, Any]) -> Application:
    """One competitor as an application of its own (its own consumer group) on shared topics."""
    kind = cls.split(":")[1]
    topics: dict[str, dict[str, Any]] = {
        FEATURES_TOPIC: {"consumers": ["m.in"], "partitions": 4},
        MODELS_TOPIC: {"consumers": ["m.model"], "config": {"cleanup.policy": "compact"}},
    }
    if kind == "WineClassifier":
        topics[PREDICTIONS_TOPIC] = {"producers": ["m.out"], "partitions": 4}
    elif kind == "WineDrift":
        topics[PREDICTIONS_TOPIC] = {"consumers": ["m.outputs"], "partitions": 4}
        topics[f"{name}-control"] = {"consumers": ["m.control"]}
        topics[f"{name}-out"] = {"producers": ["m.reports", "m.alerts"]}
    else:
        topics[f"{name}-control"] = {"consumers": ["m.drift"]}
        topics[f"{name}-out"] = {"producers": ["m.out"], "partitions": 4}
    app = Application.from_dict(
        {
            "name": name,
            "schema_paths": [str(s.SCHEMAS)],
            "python_paths": [str(s.WINE)],
            "kafka": {"bootstrap": bootstrap, "config": {}},
            "streamlets": {"m": {"class": cls, "config": config}},
            "topics": topics,
        }
    )
    ensure_topics(KafkaClients(bootstrap=bootstrap).admin(), app)
    return app


def _counts(port: int) -> tuple[float, float]:
    """(records in, records skipped) from a replica's metrics; zeros while it is not up."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0, 0.0
    total = skipped = 0.0
    for line in text.splitlines():
        if line.startswith("streamflow_records_in_total"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("streamflow_records_skipped_total") and 'reason="budget"' in line:
            skipped += float(line.rsplit(" ", 1)[1])
    return total, skipped


def measure(app: Application, name: str, records: int, workdir: Path) -> dict[str, Any]:
    expected = 2 * records if name == "drift" else records  # drift reads inputs and outputs
    workdir.mkdir(parents=True, exist_ok=True)
    with support.replicas(app, workdir) as running:
        replica = running.start("m")
        deadline = time.monotonic() + 600
        started, first = None, 0.0
        while True:
            count, shed = _counts(replica.health_port)
            now = time.monotonic()
            if count and started is None:
                started, first = now, count
            if count >= expected:
                break
            if now > deadline:
                raise RuntimeError(f"{name}: {count:.0f} of {expected} in 600 s\n{running.log()}")
            time.sleep(0.02)  # polling a counter, not synchronising
    assert started is not None
    seconds = max(now - started, 1e-6)
    inputs = records * (expected - first) / expected  # model inputs after the first batch
    return {"competitor": name, "seconds": seconds, "records_per_s": inputs / seconds, "shed": shed}


def _workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="bench-monitoring-"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args(argv)
    trainer = load_wine_trainer()
    models = _workdir()
    keras_file, _ = trainer.export(trainer.train_model(1), out=models, version=1)
    frame = trainer.load_wine_frame()
    with common.broker(args.bootstrap) as (bootstrap, broker):
        from streamflow.schema import SchemaStore, SingleObjectCodec

        store = SchemaStore([s.SCHEMAS])
        codec = SingleObjectCodec(store.get("examples.wine.WineFeatures"), store=store)
        apps = {
            name: _application(bootstrap, f"bench-{index}-{uuid.uuid4().hex[:6]}", cls, config)
            for index, (name, (cls, config)) in enumerate(COMPETITORS.items())
        }
        rows = []
        for i in range(args.records):
            row = frame.x[i % len(frame.x)]
            value = {"id": f"w{i}", "label": int(frame.y[i % len(frame.x)])}
            value.update({f: float(row[j]) for j, f in enumerate(trainer.FEATURES)})
            rows.append((f"w{i}", codec.encode(value)))
        support.produce(bootstrap, FEATURES_TOPIC, rows)
        descriptor = SingleObjectCodec(store.get("streamflow.ml.ModelDescriptor"), store=store)
        push = s.descriptor(1, "KERAS", data=keras_file.read_bytes())
        support.produce(bootstrap, MODELS_TOPIC, [("wine", descriptor.encode(push))])
        work = _workdir()
        runs = []
        for name, app in apps.items():  # serving first: it writes what drift reads
            runs.append(measure(app, name, args.records, work / name))
            print(f"{name}: {runs[-1]['records_per_s']:,.0f} records/s", flush=True)
    serving = runs[0]["records_per_s"]
    for run in runs:
        run["relative_to_serving"] = run["records_per_s"] / serving
    result = {
        "benchmark": "monitoring",
        "date": dt.datetime.now(dt.UTC).isoformat(),
        "records": args.records,
        "broker": broker,
        "environment": common.environment(),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"monitoring-{dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print("| competitor | records/s | vs serving | shed (budget) |\n|---|---:|---:|---:|")
    for run in runs:
        print(
            f"| {run['competitor']} | {run['records_per_s']:,.0f} | "
            f"{run['relative_to_serving']:.2f}x | {run['shed']:,.0f} |"
        )
    print(f"\n{args.records:,} wine records; results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
