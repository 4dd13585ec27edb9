"""Columns against records: the wine classifier and a passthrough, paired by round.

``python -m bench.columnar [--records 150000] [--rounds 3]`` runs, on one broker, each
round in alternating order, one replica (batches of 500, at-least-once) of:

* ``columns``: the wine classifier as it ships (``ModelServing.process_columns``: the
  features decoded into columns by the native codec, straight into the model, the
  predictions encoded back from columns);
* ``records``: the same classifier served record by record (``process_batch``: a dict per
  record in, a dict per prediction out), as every release before columns did;
* ``passthrough``: a per-record streamlet that copies each features record to its output;
* ``column passthrough``: the same copy on columns.

Each is timed from its first output to the last (end offsets, not sleeps), on topics of
its own holding the same records. The ratios are taken within a round, and their median
over the rounds is reported: the issue's target is the classifier on columns at 0.8x the
per-record passthrough of the same run, or better.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.serving import time_outputs  # noqa: E402
from tests.model_fixtures import load_wine_trainer  # noqa: E402
from tests.runtime import support  # noqa: E402
from tests.streamlets.serving import kafka_support as k  # noqa: E402
from tests.streamlets.serving import serving_support as s  # noqa: E402

CLASSES = {
    "columns": "classifier_app:WineClassifier",
    "records": "columnar_apps:RecordWineClassifier",
    "passthrough": "columnar_apps:WinePassthrough",
    "column passthrough": "columnar_apps:ColumnPassthrough",
}
_MODELS = ("columns", "records")
_MODEL_TOPICS = {
    "models": {"consumers": ["classifier.model"], "config": {"cleanup.policy": "compact"}},
    "status": {"producers": ["classifier.status"]},
}


def rate(bootstrap: str, tmp: Path, name: str, items: list[Any], keras: bytes) -> float:
    """Records/s of one competitor over ``items``, on topics of its own."""
    config = {**s.CONFIG, "cache_dir": str(tmp / "cache")} if name in _MODELS else {}
    app = support.make_app(
        bootstrap,
        streamlets={"classifier": {"class": CLASSES[name], "replicas": 1, "config": config}},
        topics={
            "features": {"consumers": ["classifier.in"], "partitions": 4},
            "predictions": {"producers": ["classifier.out"], "partitions": 4},
            **(_MODEL_TOPICS if name in _MODELS else {}),
        },
        schema_paths=k.STORE_PATHS,
        python_paths=[s.WINE, ROOT / "bench"],
    )
    support.produce(bootstrap, support.topic(app, "features"), items)
    if name in _MODELS:
        k.push(bootstrap, app, s.descriptor(1, "KERAS", data=keras))
    with support.replicas(app, tmp) as running:
        running.start("classifier", extra_args=("--batch-size", "500"))
        seconds = time_outputs(bootstrap, support.topic(app, "predictions"), len(items))
    return len(items) / seconds


def run(bootstrap: str, tmp: Path, records: int, rounds: int) -> dict[str, Any]:
    train = load_wine_trainer()
    model = train.train_model(1)
    keras_file, _ = train.export(model, out=tmp / "models", version=1)
    keras = Path(keras_file).read_bytes()

    class _Models:  # what kafka_support.features reads
        x, y = train.load_wine_frame().x, train.load_wine_frame().y

    items = k.features(_Models, records)  # type: ignore[arg-type]
    runs: list[dict[str, float]] = []
    names = list(CLASSES)
    for round_ in range(rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        measured = {name: rate(bootstrap, tmp, name, items, keras) for name in order}
        runs.append(measured)
        _say(f"  round {round_}: " + ", ".join(f"{n} {r:,.0f}" for n, r in measured.items()))
    ratios = {
        "columns_vs_passthrough": [r["columns"] / r["passthrough"] for r in runs],
        "columns_vs_records": [r["columns"] / r["records"] for r in runs],
        "records_vs_passthrough": [r["records"] / r["passthrough"] for r in runs],
        "column_passthrough_vs_passthrough": [
            r["column passthrough"] / r["passthrough"] for r in runs
        ],
    }
    return {
        "records": records,
        "rounds": runs,
        "rates": {n: statistics.median(r[n] for r in runs) for n in names},
        "ratios": {name: statistics.median(values) for name, values in ratios.items()},
    }


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch, common.broker(args.bootstrap) as (bootstrap, _):
        result = run(bootstrap, Path(scratch), args.records, args.rounds)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
