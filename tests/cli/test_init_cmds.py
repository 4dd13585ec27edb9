"""``streamflow init NAME``: the project it writes verifies, and a bad NAME or folder is refused.

The whole user path (a wheel installed, the project run and its tests passed) is
tests/packaging; these are the quick checks of the command itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from streamflow.cli.main import app


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output
    return result


def test_init_writes_a_project_that_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    made = invoke("init", "Quick-Start")
    assert made.exit_code == 0, made.output
    project = tmp_path / "Quick-Start"
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()) == [
        ".dockerignore",
        ".gitignore",
        "README.md",
        "blueprint.yaml",
        "pyproject.toml",
        "quick_start_app.py",
        "schemas/quick_start/Reading.avsc",
        "schemas/quick_start/Score.avsc",
        "tests/test_quick_start_app.py",
    ]
    assert 'name = "Quick-Start"' in (project / "pyproject.toml").read_text()
    monkeypatch.chdir(project)
    verified = invoke("verify")  # blueprint.yaml by default
    assert verified.exit_code == 0, verified.output
    assert "✓ quick-start: 3 streamlets, 2 topics, 0 problems" in verified.stdout


@pytest.mark.parametrize("name", ["9lives", "has space", "-x", "class"])
def test_a_name_that_cannot_name_a_project_is_a_usage_error(tmp_path: Path, name: str) -> None:
    result = invoke("init", name, "--dir", str(tmp_path / "p"))
    assert result.exit_code == 2
    assert not (tmp_path / "p").exists()


def test_a_folder_with_files_is_never_written_into(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    result = invoke("init", "demo", "--dir", str(tmp_path))
    assert result.exit_code == 2
    assert "already exists and is not an empty folder" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
