"""``streamflow score`` at the command line: clear errors, and ``--start`` on a JSON-lines file."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.model_fixtures import WineModels
from tests.score.support import FEATURES, ROOT, blueprint, cli_env

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


def _copying_blueprint(tmp_path: Path) -> Path:
    """One streamlet that copies readings (tests/runtime's ``Scale``): no model to load."""
    tag = uuid.uuid4().hex[:8]
    config = {
        "name": f"score-copy-{tag}",
        "python_paths": [str(ROOT / "tests" / "runtime")],
        "schemas": [str(ROOT / "tests" / "runtime" / "schemas")],
        "streamlets": {"scale": {"class": "apps:Scale"}},
        "topics": {
            f"readings-{tag}": {"consumers": ["scale.in"], "partitions": 1},
            f"scaled-{tag}": {"producers": ["scale.out"], "partitions": 1},
        },
    }
    path = tmp_path / "copy.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def _dead_letters(out: Path) -> dict[int, dict[str, object]]:
    lines = out.with_name(out.stem + ".dead-letters.jsonl").read_text().splitlines()
    return {letter["row"]: letter for letter in map(json.loads, lines)}


@pytest.mark.timeout(600)
def test_rows_a_hostile_file_holds_are_dead_letters_and_the_rest_are_scored(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    data = pytest.importorskip("tests.score.hostile_data")  # it needs pyarrow
    app = _copying_blueprint(tmp_path)
    lines, table = tmp_path / "readings.jsonl", tmp_path / "readings.parquet"
    lines.write_bytes(data.hostile_lines())
    data.hostile_parquet(table, values=40_000_000, count=1300)
    assert table.stat().st_size < 17 * 1024
    for source, rows in ((lines, [0, 3, 6]), (table, [0, 1, 2, 5])):
        out = tmp_path / f"scaled-{source.suffix[1:]}.jsonl"
        result = _score(
            tmp_path, str(app), "--start", "-b", kafka_bootstrap, "-i", str(source),
            "-o", str(out), "--progress", "none",
            timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-4000:]
        assert "Traceback" not in result.stderr + result.stdout
        assert [json.loads(line)["row"] for line in out.read_text().splitlines()] == rows
        dead = _dead_letters(out)
        assert all(letter["stage"] == "input" for letter in dead.values())
        errors = {row: letter["error"] for row, letter in dead.items()}
        if source == lines:
            assert dead[7]["input"] == {"id": "\ud800", "seq": 7, "value": 7}
            assert "surrogates not allowed" in errors.pop(7)  # parsed; the encoder refuses it
            assert errors == {
                1: "line 2: not valid JSON: nested deeper than 64 levels",
                2: "line 3: not valid JSON: a number of more than 4,300 digits",
                4: "line 5: not UTF-8: byte 0xff at column 9",
                5: "line 6: not valid JSON: nested deeper than 64 levels",
            }
        else:
            assert sorted(errors) == [3, 4]
            assert errors[3].startswith("row 3 (row group 1) is not read: its footer declares")
            assert errors[4] == (
                "row 4 (row group 2) is not read: reading it takes more memory than a batch "
                "of rows may (1 GiB)"
            )
