"""``streamflow verify | graph | describe`` as a user runs them: output and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from streamflow.cli.main import app

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "blueprints" / "wine" / "blueprint.yaml"
FIXTURES = ROOT / "tests" / "blueprint" / "fixtures"
BROKEN = FIXTURES / "broken_blueprint.yaml"


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


# -- verify ----------------------------------------------------------------


def test_verify_a_valid_blueprint() -> None:
    result = invoke("verify", EXAMPLE)
    assert result.exit_code == 0
    assert result.stdout.strip() == "✓ wine-quality: 3 streamlets, 2 topics, 0 problems"


def test_verify_an_invalid_blueprint_lists_problems_and_exits_1() -> None:
    result = invoke("verify", BROKEN)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert (
        f"{BROKEN}:4:5: error[unknown-field]: unknown field 'clas' in streamlet 'source'" in lines
    )
    assert "  hint: did you mean `class`?" in lines
    assert any(":6:12: error[class-not-found]: streamlet other:" in line for line in lines)
    assert lines[-1] == "✗ broken: 2 errors"


def test_verify_json_output() -> None:
    result = invoke("verify", BROKEN, "-o", "json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert data["application"] == "broken"
    first = data["problems"][0]
    assert first["code"] == "unknown-field"
    assert (first["line"], first["column"], first["severity"]) == (4, 5, "error")
    assert first["hint"] == "did you mean `class`?"


def test_verify_json_of_a_valid_blueprint() -> None:
    result = invoke("verify", EXAMPLE, "--output", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "valid": True,
        "application": "wine-quality",
        "problems": [],
    }


def test_verify_with_overrides() -> None:
    good = invoke("verify", EXAMPLE, "--set", "scorer.threshold=7", "--set", "source.count=5")
    assert good.exit_code == 0
    bad = invoke("verify", EXAMPLE, "--set", "scorer.threshold=11")
    assert bad.exit_code == 1
    assert "<--set>:1:1: error[invalid-config-value]: --set scorer.threshold=11" in bad.stdout


def test_verify_usage_errors_exit_2(tmp_path: Path) -> None:
    assert invoke("verify", tmp_path / "nope.yaml").exit_code == 2
    assert invoke("verify", tmp_path).exit_code == 2  # a directory is not a blueprint
    assert invoke("verify", EXAMPLE, "--set", "threshold").exit_code == 2
    assert invoke("verify", EXAMPLE, "-o", "xml").exit_code == 2


# -- graph -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("text", "source.out ─[examples.wine.WineSample]─▶ wine-samples"),
        ("mermaid", '    s_source -->|"out: examples.wine.WineSample"| t_wine_samples'),
        ("dot", '"streamlet:source" -> "topic:wine-samples"'),
    ],
)
def test_graph_formats(fmt: str, expected: str) -> None:
    result = invoke("graph", EXAMPLE, "-o", fmt)
    assert result.exit_code == 0
    assert expected in result.stdout


def test_graph_of_an_invalid_blueprint_shows_problems_and_exits_1() -> None:
    result = invoke("graph", BROKEN, "-o", "dot")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "error[unknown-field]" in result.stderr


# -- describe --------------------------------------------------------------


def test_describe_prints_the_descriptor_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLE.parent)
    result = invoke("describe", "wine_app:QualityScorer")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert (data["class"], data["shape"], data["logic"]) == (
        "wine_app:QualityScorer",
        "processor",
        "process_batch",
    )
    (inlet,) = data["inlets"]
    assert inlet["schema"] == "examples.wine.WineSample"
    assert len(inlet["fingerprint"]) == 16
    assert data["params"][0]["name"] == "threshold"


def test_describe_with_path_and_table_output() -> None:
    result = invoke(
        "describe", "bp_fixture_streamlets:Source", "--path", FIXTURES, "-o", "table",
        "--schemas", FIXTURES / "schemas",
    )  # fmt: skip
    assert result.exit_code == 0
    assert "bp_fixture_streamlets:Source  (ingress, logic: source)" in result.stdout
    assert "tests.fixtures.Reading" in result.stdout
    assert "rate" in result.stdout


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (
            "DuplicatePorts",
            "error[invalid-streamlet]: bp_fixture_streamlets:DuplicatePorts: "
            "Inlet second: port name 'in' is also used by Inlet first",
        ),
        (
            "BadDefault",
            "error[invalid-streamlet]: bp_fixture_streamlets:BadDefault: "
            "parameter factor: default 5.0 is invalid: 5.0 is above the maximum 1",
        ),
    ],
)
def test_describe_a_broken_class(cls: str, message: str) -> None:
    result = invoke("describe", f"bp_fixture_streamlets:{cls}", "--path", FIXTURES)
    assert result.exit_code == 1
    assert message in result.stderr.splitlines()
    assert result.stdout == ""


def test_describe_a_missing_class() -> None:
    result = invoke("describe", "bp_fixture_streamlets:Nope", "--path", FIXTURES)
    assert result.exit_code == 1
    assert "error[class-not-found]: bp_fixture_streamlets has no attribute 'Nope'" in result.stderr
    assert "hint: streamlets in bp_fixture_streamlets:" in result.stderr


def test_describe_a_missing_module_hints_at_the_path() -> None:
    result = invoke("describe", "no_such_module_anywhere:Thing")
    assert result.exit_code == 1
    assert "error[class-not-found]" in result.stderr
    assert "hint:" in result.stderr


# -- the app itself ---------------------------------------------------------


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip().startswith("streamflow ")


def test_no_arguments_shows_help() -> None:
    result = invoke()
    assert "Usage" in result.output
    assert "verify" in result.output


# -- a real process --------------------------------------------------------


def run_cli(*args: object, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_exit_codes_of_a_real_process(tmp_path: Path) -> None:
    ok = run_cli("verify", "blueprints/wine/blueprint.yaml")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "✓ wine-quality: 3 streamlets, 2 topics, 0 problems"

    invalid = run_cli("verify", BROKEN)
    assert invalid.returncode == 1
    assert f"{BROKEN}:4:5: error[unknown-field]" in invalid.stdout

    usage = run_cli("verify", tmp_path / "missing.yaml")
    assert usage.returncode == 2
    assert "does not exist" in usage.stderr

    broken = run_cli("describe", "bp_fixture_streamlets:DuplicatePorts", cwd=FIXTURES)
    assert broken.returncode == 1
    assert "error[invalid-streamlet]" in broken.stderr

    for process in (ok, invalid, usage, broken):
        assert "Traceback" not in process.stdout + process.stderr
