"""``$STREAMFLOW_HOME`` is private: directories 0700, files 0600, an older, looser home tightened.

Issue 10, finding 16: the local state (specs, Kafka addresses, replica logs,
the daemon's pid record and locks) was created 0755/0644, readable by every
user of the machine. A real ``deploy`` (its detached daemon and replicas) and
a real ``run`` write the tree here; then every entry's mode is checked.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamflow.operator.local import store
from tests.cli.test_deploy_cmds import make_project, stop_leftovers
from tests.cli.test_run_tail import make_project as make_run_project


def loose_entries(root: Path) -> list[str]:
    """Everything under ``root`` (itself included) that group or others may use at all."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        if stat.S_IMODE(mode) & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.S_IMODE(mode):04o}")
    return found


@pytest.fixture
def old_home(tmp_path: Path) -> Iterator[Path]:
    """A home left by an older streamflow: 0755 directories and a 0644 spec."""
    home = tmp_path / "project" / "home"
    (home / "apps" / "old").mkdir(parents=True)
    (home / "apps" / "old" / "app.json").write_text("{}")
    for path in (home, home / "apps", home / "apps" / "old"):
        path.chmod(0o755)
    (home / "apps" / "old" / "app.json").chmod(0o644)
    yield home


def test_deploy_keeps_the_home_private_and_tightens_an_old_one(
    old_home: Path, kafka_bootstrap: str
) -> None:
    project = make_project(old_home.parent)
    assert project.home == old_home
    try:
        result = project.cli("deploy", str(project.blueprint), "-b", kafka_bootstrap)
        assert result.returncode == 0, result.stderr
        assert (project.app_dir / "logs").is_dir()
        assert (project.home / "operator" / "daemon.json").is_file()
        assert loose_entries(project.home) == []
        undeployed = project.cli("undeploy", project.app)
        assert undeployed.returncode == 0, undeployed.stderr
    finally:
        stop_leftovers(project)
    assert loose_entries(project.home) == []


def test_run_keeps_the_home_private(tmp_path: Path, kafka_bootstrap: str) -> None:
    project = make_run_project(tmp_path, count=5)
    result = project.cli("run", str(project.blueprint), "-b", kafka_bootstrap, "--for", "3s")
    assert result.returncode == 0, result.stderr
    assert (project.home / "apps" / project.app).is_dir()
    assert loose_entries(project.home) == []


def test_state_writes_are_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMFLOW_HOME", str(tmp_path / "home"))
    home = store.home()
    store.write_json(home.app("x").spec, {"a": 1})
    store.write_json(home.app("x").status, {"b": 2})
    assert loose_entries(tmp_path / "home") == []
