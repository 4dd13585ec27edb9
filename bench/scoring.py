"""Batch through streaming: ``streamflow score`` against a hand-written feed-and-collect loop.

Both push the same Parquet file of ``PassRecord`` rows (100 B) through the same
running application, a streamflow passthrough processor between an input and an
output topic, and write the results to Parquet:

* ``score``: the command as a user runs it, ``streamflow score APP -i rows.parquet
  -o out.parquet --progress none``; it reads the rows, writes each with its run and
  row headers, collects exactly its results (and dead letters) from where the output
  topics ended, keeps at most 10,000 in flight, saves its state for a resume, and
  writes the results in row order;
* ``hand`` (:mod:`bench.hand_score`): pyarrow, fastavro and confluent-kafka
  directly. It produces every row flat out, reads the output topic from where it
  ended until as many records are back as it sent, and writes them. No run id, no
  dead letters, no bound on what is in flight, no resume: the least a script needs
  when it owns the topics.

Each is its own process, timed from start to exit (start-up included: both are
commands a user waits for), in interleaved rounds (score, hand; then hand, score).
The processor keeps running between runs, and has passed a hundred rows on before
the first; the counts are checked after each.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import common, sfapp
from bench.child import Child

ROWS = 100_000
STREAMFLOW = Path(sys.executable).with_name("streamflow")


def _blueprint(workdir: Path, name: str, input_topic: str, output_topic: str) -> Path:
    """The processor as a blueprint (what ``score`` reads), beside its app spec."""
    topic = {"partitions": common.PARTITIONS}
    config = {
        "name": name,
        "schemas": [str(common.SCHEMA_DIR)],
        "python_paths": [str(common.REPO)],
        "streamlets": {sfapp.STREAMLET: {"class": "bench.streamlets:PassBatch"}},
        "topics": {
            input_topic: {"consumers": [f"{sfapp.STREAMLET}.in"], **topic},
            output_topic: {"producers": [f"{sfapp.STREAMLET}.out"], **topic},
        },
    }
    path = workdir / f"{name}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def _rows_file(workdir: Path, rows: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(rows)
    records = [common.make_record(i, rng.randbytes(40)) for i in range(rows)]  # ~100 B
    path = workdir / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def _timed(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {done.returncode}: {done.stderr[-3000:]}")
    return took


def run_scenario(
    bootstrap: str, workdir: Path, *, rows: int = ROWS, rounds: int = 3
) -> dict[str, Any]:
    tag = f"score-{uuid.uuid4().hex[:6]}"
    input_topic, output_topic = f"{tag}.in", f"{tag}.out"
    topics = common.Topics(bootstrap)
    topics.create(input_topic)
    topics.create(output_topic)
    blueprint = _blueprint(workdir, tag, input_topic, output_topic)
    spec = sfapp.write_spec(
        workdir, name=tag, input_topic=input_topic, output_topic=output_topic, lineage=True
    )  # the scorer finds its results by the lineage the replica copies
    data = _rows_file(workdir, rows)
    processor = Child(
        sfapp.command(spec, bootstrap=bootstrap, records=10**12), workdir / f"{tag}.log"
    )
    env = {**os.environ, "STREAMFLOW_HOME": str(workdir / "home")}
    env.pop("STREAMFLOW_KAFKA_BOOTSTRAP", None)
    runs: list[dict[str, Any]] = []
    try:
        # untimed: until the processor has joined its group and passed rows on, so that
        # neither scorer's first round waits for it
        warm = workdir / "warm"
        warm.mkdir()
        _timed(
            [
                sys.executable, "-m", "bench.hand_score", "--bootstrap", bootstrap,
                "--input", str(_rows_file(warm, 100)), "--into", input_topic,
                "--from", output_topic, "--output", str(warm / "out.parquet"),
            ],
            cwd=common.REPO,
            env=env,
        )  # fmt: skip
        for round_ in range(rounds):
            order = ("score", "hand") if round_ % 2 == 0 else ("hand", "score")
            for who in order:
                out = workdir / f"{who}-{round_}.parquet"
                if who == "score":
                    argv = [
                        str(STREAMFLOW), "score", str(blueprint), "-b", bootstrap,
                        "-i", str(data), "-o", str(out), "--progress", "none",
                    ]  # fmt: skip
                else:
                    argv = [
                        sys.executable, "-m", "bench.hand_score", "--bootstrap", bootstrap,
                        "--input", str(data), "--into", input_topic, "--from", output_topic,
                        "--output", str(out),
                    ]  # fmt: skip
                seconds = _timed(argv, cwd=common.REPO, env=env)
                processor.check_alive()
                got = _count(out)
                if got != rows:
                    raise RuntimeError(f"{who} wrote {got} results of {rows}")
                runs.append({"round": round_, "who": who, "seconds": seconds, "rows": rows})
                _say(f"  round {round_} {who:<6} {rows / seconds:>9,.0f} rows/s  {seconds:6.1f} s")
    finally:
        processor.stop()
        topics.delete_all()
    return {"rows": rows, "rounds": rounds, "runs": runs, "summary": summarise(runs)}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rate = {
        who: statistics.median(r["rows"] / r["seconds"] for r in runs if r["who"] == who)
        for who in ("score", "hand")
    }
    ratios = [
        (s["rows"] / s["seconds"]) / (h["rows"] / h["seconds"])
        for s in runs
        if s["who"] == "score"
        for h in runs
        if h["who"] == "hand" and h["round"] == s["round"]
    ]
    return {
        "score_rows_per_s": rate["score"],
        "hand_rows_per_s": rate["hand"],
        "ratio": statistics.median(ratios),
    }


def _count(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
