"""What a rollout costs the serving streamlet: one model, a canary beside it, a shadow.

``python -m bench.rollout [--records N] [--rounds R] [--share P]`` serves the wine
classifier (ONNX, embedded) in one replica, three ways, interleaved round by round:

* **single**: the stable model alone;
* **canary**: the stable model and a candidate meeting ``--share`` percent of the keys
  (each batch split by the key hash, each part served by its model, merged back);
* **shadow**: the candidate meets every record too, its outputs to the shadow topic.

Each run loads its models first (the candidate's status says ``serving``), then the
records are written and timed from the first output to the N-th, read from the output
topic's end offsets. The ratios to **single** are the costs: the issue's targets are a
canary within 5% of one model, and a shadow costing no more than the candidate's own
inference (``shadow_extra_us`` per record against ``candidate_raw_us``, the model
called on batches of 500 with no Kafka).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.serving import time_outputs  # noqa: E402
from tests.model_fixtures import load_wine_trainer, wine_onnx  # noqa: E402
from tests.runtime import support  # noqa: E402
from tests.streamlets.serving import kafka_support as k  # noqa: E402
from tests.streamlets.serving import serving_support as s  # noqa: E402

WAYS = ("single", "canary", "shadow")


class WineModels:
    """Versions 1 and 2 of the wine classifier as ONNX, trained here as the tests train
    them, and the data set's features and labels (what ``k.features`` reads)."""

    def __init__(self, out: Path) -> None:
        train = load_wine_trainer()
        out.mkdir(parents=True, exist_ok=True)
        self.onnx = {
            version: wine_onnx(train.train_model(version), out / f"wine-v{version}.onnx")
            for version in (1, 2)
        }
        frame = train.load_wine_frame()
        self.x, self.y = frame.x, frame.y


def _statuses_say(bootstrap: str, app: Any, version: int, role: str) -> bool:
    return any(
        r["version"] == version and r["state"] == "serving" and r.get("role") == role
        for r in k.statuses(bootstrap, app)
    )


def one_run(bootstrap: str, tmp: Path, models: WineModels, way: str, n: int, share: float) -> float:
    """Records a second, for one way of serving."""
    tmp.mkdir(parents=True)
    app = k.app(bootstrap, 1, tmp / "cache", shadow=True)
    v1, v2 = (models.onnx[v].read_bytes() for v in (1, 2))
    k.push(bootstrap, app, s.descriptor(1, "ONNX", data=v1))
    with support.replicas(app, tmp) as running:
        running.start("classifier", extra_args=("--batch-size", "500"))
        k.wait_until_serving(bootstrap, app, 1, 1)
        if way != "single":
            candidate = s.descriptor(2, "ONNX", data=v2)
            candidate["rollout"] = {
                "mode": "CANARY" if way == "canary" else "SHADOW",
                "share": share if way == "canary" else 0.0,
                "arms": [],
            }
            k.push(bootstrap, app, candidate)
            deadline = time.monotonic() + 60
            while not _statuses_say(bootstrap, app, 2, "candidate"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the candidate never served: {running.log()[-2000:]}")
        records: list[tuple[str | None, bytes]] = list(k.features(models, n))  # type: ignore[arg-type]
        support.produce(bootstrap, support.topic(app, "features"), records)
        seconds = time_outputs(bootstrap, support.topic(app, "predictions"), n)
    return n / seconds


def candidate_raw_us(models: WineModels) -> float:
    """The candidate's own inference per record, on batches of 500 (onnxruntime, no Kafka)."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(models.onnx[2]), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    x = np.asarray(models.x, dtype=np.float32)
    batch = np.concatenate([x] * 3)[:500]
    session.run(None, {name: batch})
    started, calls = time.perf_counter(), 200
    for _ in range(calls):
        session.run(None, {name: batch})
    return (time.perf_counter() - started) / (calls * len(batch)) * 1e6


def run_scenario(
    bootstrap: str, tmp: Path, models: WineModels, *, n: int, rounds: int, share: float
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for round_ in range(rounds):
        order = WAYS if round_ % 2 == 0 else WAYS[::-1]
        for way in order:
            rate = one_run(bootstrap, tmp / f"{way}-{round_}", models, way, n, share)
            runs.append({"round": round_, "way": way, "rate": rate})
            print(f"  round {round_} {way:<7} {rate:>9,.0f} rec/s", file=sys.stderr, flush=True)
    by_round = {(r["round"], r["way"]): r["rate"] for r in runs}
    ratio = {
        way: statistics.median(by_round[(i, way)] / by_round[(i, "single")] for i in range(rounds))
        for way in ("canary", "shadow")
    }
    single = statistics.median(by_round[(i, "single")] for i in range(rounds))
    shadow = statistics.median(by_round[(i, "shadow")] for i in range(rounds))
    return {
        "records": n,
        "rounds": rounds,
        "share": share,
        "runs": runs,
        "canary_vs_single": ratio["canary"],
        "shadow_vs_single": ratio["shadow"],
        "shadow_extra_us": (1 / shadow - 1 / single) * 1e6,
        "candidate_raw_us": candidate_raw_us(models),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rollout", description=__doc__)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--share", type=float, default=50.0, help="the canary's percent")
    parser.add_argument("--bootstrap", help="a running broker (default: a devkit one)")
    args = parser.parse_args(argv)
    with (
        common.broker(args.bootstrap) as (bootstrap, _),
        tempfile.TemporaryDirectory() as work,
    ):
        models = WineModels(Path(work) / "models")
        result = run_scenario(
            bootstrap, Path(work), models, n=args.records, rounds=args.rounds, share=args.share
        )
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
