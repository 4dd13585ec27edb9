"""A ``class:`` outside the python_paths, in real processes: verify, a replica, the operator's
verifier child. Each refuses it with the reason and the paths it searched, exits non-zero, and
never imports the module: the planted one, on ``PYTHONPATH``, leaves no marker file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamflow.cli.main import app
from streamflow.operator.kubernetes.verify import ANSWER_PREFIX
from streamflow.operator.kubernetes.verify_child import REQUEST_ENV, encode_request
from tests.blueprint.planted import PRINTED, Planted, plant

SCHEMAS = Path(__file__).parents[1] / "blueprint" / "fixtures" / "schemas"


def run(
    *args: object, cwd: Path, pythonpath: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=cwd,
        env={
            **os.environ,
            "NO_COLOR": "1",
            "COLUMNS": "300",
            "PYTHONPATH": str(pythonpath),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "app"
    directory.mkdir()
    return directory.resolve()


@pytest.fixture
def planted(tmp_path: Path) -> Planted:
    """A module on the processes' ``PYTHONPATH``, not in any python_paths."""
    return plant(tmp_path / "elsewhere")


def assert_untouched(planted: Planted, done: subprocess.CompletedProcess[str]) -> None:
    assert not planted.imported, f"{planted.name} was imported"
    assert PRINTED not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_verify_refuses_a_class_outside_the_python_paths(app_dir: Path, planted: Planted) -> None:
    blueprint = app_dir / "bp.yaml"
    blueprint.write_text(
        f"name: app\nschemas: [{SCHEMAS}]\nstreamlets:\n  s:\n    class: {planted.name}:Evil\n"
    )
    done = run(
        "-m", "streamflow.cli.main", "verify", blueprint,
        cwd=app_dir.parent, pythonpath=planted.file.parent,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert any(
        line.startswith(f"{blueprint}:5:12: error[module-outside-python-paths]: streamlet s: ")
        and f"module '{planted.name}'" in line
        for line in lines
    ), done.stdout
    assert any(line.startswith("  hint: ") and str(app_dir) in line for line in lines)
    assert_untouched(planted, done)


def test_verify_of_a_standard_library_class_imports_nothing(app_dir: Path, tmp_path: Path) -> None:
    blueprint = app_dir / "bp.yaml"
    blueprint.write_text(
        "name: app\nstreamlets:\n  a: {class: 'this:X'}\n  b: {class: 'antigravity:Y'}\n"
    )
    done = run(
        "-m", "streamflow.cli.main", "verify", blueprint,
        cwd=app_dir, pythonpath=tmp_path, env={"BROWSER": "true"},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout.count("error[module-outside-python-paths]") == 2
    assert "Beautiful is better than ugly" not in done.stdout + done.stderr


def test_a_replica_refuses_a_tampered_spec(app_dir: Path, planted: Planted) -> None:
    spec = app_dir / "app.json"
    spec.write_text(
        json.dumps(
            {
                "name": "app",
                "python_paths": [str(app_dir)],
                "schema_paths": [str(SCHEMAS)],
                "streamlets": {"s": {"class": f"{planted.name}:Evil"}},
                "topics": {},
            }
        )
    )
    done = run(
        "-m", "streamflow.cli.main", "streamlet", "run", "--app-spec", spec, "--streamlet", "s",
        "--bootstrap-servers", "127.0.0.1:9", "--health-port", "0",
        cwd=app_dir, pythonpath=planted.file.parent,
    )  # fmt: skip
    assert done.returncode == 1
    assert "module-outside-python-paths" in done.stderr
    assert f"module '{planted.name}' is not in the python_paths" in done.stderr
    assert str(app_dir) in done.stderr  # the paths it searched
    assert_untouched(planted, done)


def test_the_operators_verifier_child_refuses_it(app_dir: Path, planted: Planted) -> None:
    application = {
        "name": "app",
        "python_paths": [str(app_dir)],
        "schema_paths": [str(SCHEMAS)],
        "streamlets": {"s": {"class": f"{planted.name}:Evil"}},
        "topics": {},
    }
    done = run(
        "-P", "-m", "streamflow.operator.kubernetes.verify_child",
        cwd=app_dir, pythonpath=planted.file.parent,
        env={REQUEST_ENV: encode_request(application)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.partition(ANSWER_PREFIX)[2])
    problems = [p for p in answer["problems"] if p["code"] == "module-outside-python-paths"]
    assert [p["where"] for p in problems] == ["spec.streamlets.s.class"]
    assert str(app_dir) in problems[0]["hint"]
    assert answer["streamlets"] == {}
    assert_untouched(planted, done)


def test_the_verify_help_says_where_classes_come_from() -> None:
    result = CliRunner().invoke(app, ["verify", "--help"], env={"COLUMNS": "100"})
    text = " ".join(result.stdout.split())
    assert "only from the streamflow package and the blueprint's directory and python_paths" in text
    assert "its module is not imported" in text


def test_verify_loads_a_class_of_nested_namespace_packages_in_the_python_paths(
    app_dir: Path, tmp_path: Path
) -> None:
    """As ``tests.streamlets.drift.drift_support`` is loaded, in a process that has none of it."""
    planted = plant(app_dir / "lib", "outer_ns.inner_ns.mod")  # no __init__.py anywhere
    blueprint = app_dir / "bp.yaml"
    blueprint.write_text(
        f"name: app\nschemas: [{SCHEMAS}]\npython_paths: [lib]\n"
        f"streamlets:\n  s:\n    class: {planted.name}:Evil\n"
    )
    done = run(
        "-m", "streamflow.cli.main", "verify", blueprint,
        cwd=tmp_path, pythonpath=tmp_path / "nothing-here",
    )  # fmt: skip
    for code in ("class-not-found", "module-outside-python-paths", "shadowing-module"):
        assert f"error[{code}]" not in done.stdout, done.stdout
    assert "error[unconnected-outlet]" not in done.stdout  # it is a warning: the class loaded
    assert "warning[unconnected-outlet]" in done.stdout
    assert planted.imported
