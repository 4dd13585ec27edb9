"""``streamflow score`` as a user runs it: 100,000 rows of Parquet through the wine classifier.

The application runs with ``streamflow run`` on the session's broker, its
``samples`` feed sending live traffic into the same input topic all along.
The scorer is killed with SIGKILL half-way and run again with the same
command; it resumes. At the end every row is accounted for (results + dead
letters = rows), and every result equals what the same Keras model says about
the same row in memory.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.model_fixtures import WineModels
from tests.score.support import FEATURES, blueprint, cli_env
from tests.waiting import wait_until

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

STREAMFLOW = Path(sys.executable).with_name("streamflow")
ROWS = 100_000
BAD_ROWS = (7, 50_001, 99_999)  # a feature missing: the input schema refuses them


def _data_set(tmp_path: Path, models: WineModels) -> tuple[Path, np.ndarray]:
    """ROWS rows cycling through the 178 wines; the features as the model sees them."""
    x = np.asarray(models.x, dtype=np.float32)
    picks = np.arange(ROWS) % len(x)
    features = x[picks]
    columns: dict[str, Any] = {"id": [f"row-{i}" for i in range(ROWS)]}
    for j, name in enumerate(FEATURES):
        column: list[float | None] = [float(v) for v in features[:, j]]
        if j == 3:
            for bad in BAD_ROWS:
                column[bad] = None
        columns[name] = column
    columns["label"] = [int(models.y[p]) for p in picks]
    path = tmp_path / "wines.parquet"
    pq.write_table(pa.table(columns), path)
    return path, features


def _progress(log: Path) -> list[dict[str, Any]]:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if line.startswith('{"event": "progress"')]


@pytest.mark.timeout(900)
def test_a_parquet_data_set_is_scored_killed_half_way_resumed_and_every_row_accounted_for(
    kafka_bootstrap: str, wine_models: WineModels, tmp_path: Path
) -> None:
    app_file = blueprint(tmp_path, wine_models)
    data, features = _data_set(tmp_path, wine_models)
    results = tmp_path / "scores.parquet"
    env = cli_env(tmp_path)
    app_log = open(tmp_path / "app.log", "w")  # noqa: SIM115 - closed in finally
    app = subprocess.Popen(
        [str(STREAMFLOW), "run", str(app_file), "-b", kafka_bootstrap],
        env=env,
        stdout=app_log,
        stderr=subprocess.STDOUT,
    )
    command = [
        str(STREAMFLOW), "score", str(app_file), "-b", kafka_bootstrap,
        "--input", str(data), "--output", str(results), "--progress", "json",
    ]  # fmt: skip
    try:
        wait_until(
            lambda: (
                "Ctrl-C stops everything" in (tmp_path / "app.log").read_text()
                or app.poll() is not None
            ),
            what="the application's topics and replicas",
            timeout=180,
            interval=0.2,
        )
        assert app.poll() is None, (tmp_path / "app.log").read_text()[-3000:]
        first_log = tmp_path / "first.log"
        with open(first_log, "w") as err:
            first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=err)
        wait_until(
            lambda: (
                any(p["results"] >= ROWS // 3 for p in _progress(first_log))
                or first.poll() is not None
            ),
            what="a third of the results",
            timeout=420,
            interval=0.2,
        )
        assert first.poll() is None, first_log.read_text()[-3000:]
        first.send_signal(signal.SIGKILL)
        first.wait(30)

        second = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert second.returncode == 0, second.stderr[-4000:]
        assert "resuming run" in second.stderr, second.stderr[-2000:]
        summary = json.loads(second.stdout.strip().splitlines()[-1])
    finally:
        app.send_signal(signal.SIGINT)
        try:
            app.wait(120)
        except subprocess.TimeoutExpired:
            app.kill()
        app_log.close()

    # every row accounted for: results + dead letters = rows
    assert summary["rows"] == ROWS
    assert summary["results"] + summary["dead_letters"] == ROWS
    assert summary["dead_letters"] == len(BAD_ROWS)
    dead = [
        json.loads(line) for line in Path(summary["dead_letters_file"]).read_text().splitlines()
    ]
    assert [d["row"] for d in dead] == list(BAD_ROWS)
    assert all(d["stage"] == "input" and "alcalinity_of_ash" in d["error"] for d in dead), dead

    table = pq.read_table(results).to_pydict()
    rows = table["row"]
    assert rows == sorted(rows) and len(rows) == ROWS - len(BAD_ROWS)
    assert table["id"] == [f"row-{r}" for r in rows]  # the row's own result, in input order
    # equal to scoring in memory with the same model
    expected = np.asarray(wine_models.v1.model.predict(features[rows], verbose=0))
    assert table["predicted"] == [int(c) for c in expected.argmax(axis=1)]
    np.testing.assert_allclose(np.asarray(table["probabilities"]), expected, atol=1e-5)
    assert set(table["model_version"]) == {1}
