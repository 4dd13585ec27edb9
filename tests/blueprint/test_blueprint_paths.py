"""Where schemas and streamlet modules are found for a blueprint outside this checkout."""

from __future__ import annotations

import shutil
from pathlib import Path

from streamflow.blueprint import paths, verify_file
from tests.blueprint.bp_helpers import FIXTURES


def test_schema_dirs_from_the_blueprint_up_to_the_project_root(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    for directory in ("schemas", "apps/one/schemas", "apps/one/deeper"):
        (tmp_path / directory).mkdir(parents=True)
    start = tmp_path / "apps" / "one" / "deeper"
    assert paths.project_schema_dirs(start=start) == [
        tmp_path / "apps" / "one" / "schemas",
        tmp_path / "schemas",
    ]
    assert paths.project_schema_dir(start=start) == tmp_path / "apps" / "one" / "schemas"
    assert paths.find_project_root(start=start) == tmp_path


def test_outside_a_project_only_the_blueprints_own_schemas_count(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "app").mkdir()
    if paths.find_project_root(start=tmp_path) is None:  # tmp is not inside a project
        assert paths.project_schema_dirs(start=tmp_path / "app") == []
        (tmp_path / "app" / "schemas").mkdir()
        assert paths.project_schema_dirs(start=tmp_path / "app") == [tmp_path / "app" / "schemas"]


def test_a_self_contained_application_verifies(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "lib").mkdir(parents=True)
    (project / ".git").mkdir()
    shutil.copytree(FIXTURES / "schemas", project / "schemas" / "tests")
    module = (FIXTURES / "bp_fixture_streamlets.py").read_text()
    (project / "lib" / "proj_streamlets.py").write_text(module)
    blueprint = project / "app.yaml"
    blueprint.write_text(
        "name: proj\n"
        "python_paths: [lib]\n"
        "streamlets:\n"
        "  source: {class: 'proj_streamlets:Source'}\n"
        "  sink: {class: 'proj_streamlets:Sink'}\n"
        "topics:\n"
        "  readings: {producers: [source.out], consumers: [sink.in]}\n"
    )
    result = verify_file(blueprint)
    assert result.problems == []
    app = result.application
    assert app is not None
    assert app.python_paths == (str(project.resolve()), str((project / "lib").resolve()))
    assert app.schema_paths == (str((project / "schemas").resolve()),)
