"""``streamflow score`` at the command line: clear errors, and ``--start`` on a JSON-lines file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.model_fixtures import WineModels
from tests.score.support import FEATURES, blueprint, cli_env

STREAMFLOW = Path(sys.executable).with_name("streamflow")


def _score(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STREAMFLOW), "score", *args],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _wines(models: WineModels, path: Path, count: int) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in models.samples.read_text().splitlines()][:count]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def test_an_input_of_unknown_format_is_refused_before_anything_runs(tmp_path: Path) -> None:
    data = tmp_path / "wines.xlsx"
    data.write_text("not a table")
    result = _score(tmp_path, "app.yaml", "-i", str(data), "-o", str(tmp_path / "out.parquet"))
    assert result.returncode == 2
    assert "cannot tell the format of" in result.stderr and "--format" in result.stderr


def test_set_without_start_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "wines.jsonl"
    data.write_text("{}\n")
    result = _score(
        tmp_path, "some-app", "-i", str(data), "-o", str(tmp_path / "o.jsonl"), "--set", "a.b=1"
    )
    assert result.returncode == 2
    assert "--set changes the application that --start runs" in result.stderr


def test_a_topic_the_application_lacks_is_named_with_the_ones_it_has(
    wine_models: WineModels, tmp_path: Path
) -> None:
    app = blueprint(tmp_path, wine_models)
    data = tmp_path / "wines.jsonl"
    _wines(wine_models, data, 3)
    result = _score(
        tmp_path, str(app), "-b", "127.0.0.1:1", "-i", str(data), "-o", str(tmp_path / "o.csv"),
        "--into", "nope",
    )  # fmt: skip
    assert result.returncode == 1
    assert "has no topic 'nope' (topics: features-" in result.stderr, result.stderr


def test_an_application_whose_streamlet_has_lineage_off_is_refused_before_anything_runs(
    wine_models: WineModels, tmp_path: Path
) -> None:
    app = blueprint(tmp_path, wine_models, lineage=False)
    data = tmp_path / "wines.jsonl"
    _wines(wine_models, data, 3)
    result = _score(
        tmp_path, str(app), "-b", "127.0.0.1:1", "-i", str(data), "-o", str(tmp_path / "o.csv")
    )
    assert result.returncode == 1
    assert "classifier has 'lineage: false' in the blueprint" in result.stderr, result.stderr
    assert "remove the setting" in result.stderr, result.stderr
    assert not (tmp_path / "o.csv").exists()


def test_an_application_not_running_is_said_plainly(
    kafka_bootstrap: str, wine_models: WineModels, tmp_path: Path
) -> None:
    app = blueprint(tmp_path, wine_models)
    data = tmp_path / "wines.jsonl"
    _wines(wine_models, data, 3)
    result = _score(
        tmp_path, str(app), "-b", kafka_bootstrap, "-i", str(data), "-o", str(tmp_path / "o.csv")
    )
    assert result.returncode == 1
    assert "does not exist" in result.stderr and "pass --start" in result.stderr, result.stderr


@pytest.mark.timeout(600)
def test_start_runs_the_application_for_the_run_and_a_bad_line_is_a_dead_letter(
    kafka_bootstrap: str, wine_models: WineModels, tmp_path: Path
) -> None:
    app = blueprint(tmp_path, wine_models)
    data = tmp_path / "wines.jsonl"
    rows = _wines(wine_models, data, 60)
    with data.open("a") as more:
        more.write('{"id": "broken", "alcohol": \n')  # line 61: not JSON
    out = tmp_path / "scores.csv"
    result = _score(
        tmp_path, str(app), "--start", "-b", kafka_bootstrap, "-i", str(data), "-o", str(out),
        "--progress", "none", "--set", "samples.rate=1",
        timeout=480,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "started here for the run" in result.stderr
    assert "60 results in" in result.stderr and "1 row dead-lettered" in result.stderr
    lines = out.read_text().splitlines()
    header = lines[0].split(",")
    assert header[:2] == ["row", "id"] and "probabilities" in header
    assert [line.split(",")[1] for line in lines[1:]] == [row["id"] for row in rows]
    dead = json.loads((tmp_path / "scores.dead-letters.jsonl").read_text())
    assert dead["row"] == 60 and dead["stage"] == "input"
    assert dead["error"].startswith("line 61: not valid JSON"), dead
    assert not any(f in dead for f in FEATURES)  # the unparsed line has no fields to show
