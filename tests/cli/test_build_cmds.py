"""``streamflow build``: the context's file selection, the extras, the commands, the errors.

Fast: nothing here builds an image (tests/images/test_app_image.py does).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamflow.blueprint import verify_file
from streamflow.cli import build_cmds
from streamflow.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
WINE = ROOT / "blueprints" / "wine"


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        (".venv/bin/python", True),
        ("tools/k8s/bin/kubelet", True),
        ("bench/results/x.json", True),
        ("web/node_modules/x/index.js", True),
        ("blueprints/wine/__pycache__/wine_app.cpython-311.pyc", True),
        (".git/HEAD", True),
        ("blueprints/wine/models/wine-v1.keras", False),
        ("blueprints/wine/models/wine-sample.jsonl", False),
        ("blueprints/wine/classifier_app.py", False),
        ("schemas/examples/wine.avsc", False),
        ("pyproject.toml", False),
    ],
)
def test_the_repository_dockerignore(rel: str, expected: bool) -> None:
    assert build_cmds.ignored(rel, build_cmds.read_ignore(ROOT)) is expected


def test_ignore_rules_follow_docker() -> None:
    patterns = ["*.log", "data/**/*.tmp", "models", "!models/keep.bin"]
    assert build_cmds.ignored("x.log", patterns)
    assert not build_cmds.ignored("sub/x.log", patterns)  # * stays in one directory
    assert build_cmds.ignored("data/a/b/c.tmp", patterns)
    assert build_cmds.ignored("data/c.tmp", patterns)
    assert build_cmds.ignored("models/other.bin", patterns)  # a directory takes its files
    assert not build_cmds.ignored("models/keep.bin", patterns)  # the last match wins


def test_project_files_prune_ignored_directories(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("# comment\n.venv/\n*.pyc\n")
    for rel in ("app.py", "x.pyc", ".venv/lib/big.so", "models/m.keras"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    found = build_cmds.project_files(tmp_path, build_cmds.read_ignore(tmp_path))
    assert found == [".dockerignore", "app.py", "models/m.keras"]


def test_the_wine_classifier_needs_tensorflow() -> None:
    result = verify_file(WINE / "classifier.yaml", require_registry=False)
    assert result.application is not None
    extras = build_cmds.needed_extras(result.application)
    assert list(extras) == ["tf"]
    assert "keras" in extras["tf"]


def test_the_simple_wine_app_needs_no_extra() -> None:
    result = verify_file(WINE / "blueprint.yaml", require_registry=False)
    assert result.application is not None
    assert build_cmds.needed_extras(result.application) == {}


def test_builder_commands(tmp_path: Path) -> None:
    buildah = build_cmds.Builder("buildah", "/usr/bin/buildah", tmp_path)
    command = buildah.build(dockerfile=Path("D"), context=Path("C"), tags=["t:1"], args={"A": "b"})
    assert command[:7] == [
        "/usr/bin/buildah",
        "--root",
        f"{tmp_path}/storage",
        "--runroot",
        f"{tmp_path}/run",
        "--storage-driver",
        "vfs",
    ]
    assert command[7:] == [
        "bud",
        "--isolation",
        "chroot",
        "-f",
        "D",
        "--build-arg",
        "A=b",
        "-t",
        "t:1",
        "C",
    ]
    assert buildah.save("t:1", "oci-archive", Path("/o.tar"))[-3:] == [
        "push",
        "t:1",
        "oci-archive:/o.tar:t:1",
    ]
    docker = build_cmds.Builder("docker", "docker")
    assert docker.build(dockerfile=Path("D"), context=Path("C"), tags=["t"], args={}) == [
        "docker",
        "build",
        "-f",
        "D",
        "-t",
        "t",
        "C",
    ]


def test_dry_run_prints_the_plan_and_commands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STREAMFLOW_IMAGES_DIR", str(tmp_path))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\nexit 1\n")  # no image exists
    (fake / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    result = CliRunner().invoke(
        app, ["build", str(WINE / "classifier.yaml"), "--builder", "docker", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "operator/Dockerfile.streamlets" in result.output
    assert "--build-arg STREAMFLOW_IMAGE=localhost/streamflow:0.1.0-" in result.output
    assert "-t localhost/streamflow/wine-classifier:" in result.output
    assert "BASE_IMAGE=docker.io/library/python:3.11-slim" in result.output
    assert not (tmp_path / "contexts").exists()  # a dry run writes nothing


def test_the_tag_is_a_content_hash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    builder = build_cmds.Builder("docker", "/nonexistent/docker")
    monkeypatch.setattr(build_cmds, "_has_image", lambda b, i: False)
    monkeypatch.setattr(build_cmds, "_image_id", lambda b, i: "")
    project = tmp_path / "proj"
    (project / "bp").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname='p'\n")
    for name in ("blueprint.yaml", "wine_app.py"):
        (project / "bp" / name).write_text((WINE / name).read_text())
    shutil.copytree(ROOT / "schemas" / "examples" / "wine", project / "schemas" / "wine")

    def plan() -> build_cmds.Plan:
        return build_cmds.make_plan(
            project / "bp" / "blueprint.yaml",
            root=None,
            tag=None,
            base_image="b",
            builder=builder,
            extras=None,
        )

    first = plan()
    assert first.root == project and first.extras == {}
    assert plan().app_image == first.app_image
    (project / "bp" / "wine_app.py").write_text((WINE / "wine_app.py").read_text() + "\n# x\n")
    assert plan().app_image != first.app_image
    assert plan().streamflow_image == first.streamflow_image


def test_no_builder_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(app, ["build", str(WINE / "classifier.yaml"), "--dry-run"])
    assert result.exit_code == 1
    assert "apt-get install buildah" in result.output


def test_bad_output_and_builder_are_usage_errors() -> None:
    blueprint = str(WINE / "classifier.yaml")
    for args in (["--output", "tar:/x"], ["--builder", "kaniko"]):
        result = CliRunner().invoke(app, ["build", blueprint, *args])
        assert result.exit_code == 2, result.output


def test_build_is_in_the_help() -> None:
    result = CliRunner().invoke(app, ["build", "--help"])
    assert result.exit_code == 0
    assert "--dry-run" in result.output and "oci-archive" in result.output
