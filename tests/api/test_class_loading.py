"""``load_streamlet_class``: a class from the streamflow package or the given paths, or nothing.

The blueprint's verifier, the replicas, ``describe`` and ``build`` all load
classes through it; the blueprint-level tests (tests/blueprint/
test_verify_class_sources.py) cover the refusals in the verifier's words.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from streamflow.api import load_streamlet_class
from streamflow.api.descriptor import ClassLoadError
from streamflow.streamlets.serving import ModelPublisher
from tests.blueprint.planted import PRINTED, plant


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_streamflow_classes_need_no_paths() -> None:
    found = load_streamlet_class("streamflow.streamlets.serving:ModelPublisher", python_paths=[])
    assert found is ModelPublisher


def test_a_mistyped_name_is_told_the_streamlets_there_even_those_loaded_on_first_use() -> None:
    with pytest.raises(ClassLoadError, match="has no attribute 'HttpIngres'") as error:
        load_streamlet_class("streamflow.streamlets.io:HttpIngres", python_paths=[])
    assert "HttpIngress" in str(error.value.hint) and "FileEgress" in str(error.value.hint)


def test_the_paths_are_required() -> None:
    with pytest.raises(TypeError):
        load_streamlet_class("streamflow.streamlets.serving:ModelPublisher")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("class_path", "module"),
    [
        ("antigravity:Foo", "antigravity"),  # opens a web browser when imported
        ("this:X", "this"),  # prints the Zen of Python
        ("os:system", "os"),
        ("subprocess.Popen", "subprocess"),
    ],
)
def test_other_modules_are_refused_unimported(
    class_path: str,
    module: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("antigravity", "this"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ClassLoadError) as raised:
        load_streamlet_class(class_path, python_paths=[tmp_path])
    assert raised.value.code == "module-outside-python-paths"
    assert f"module '{module}'" in raised.value.message
    assert str(tmp_path.resolve()) in raised.value.hint
    assert "antigravity" not in sys.modules and "this" not in sys.modules
    assert capsys.readouterr().out == ""


def test_a_streamflow_directory_in_the_paths_does_not_extend_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = plant(tmp_path / "lib", "streamflow.planted_here")
    with pytest.raises(ClassLoadError) as raised:
        load_streamlet_class("streamflow.planted_here:Evil", python_paths=[tmp_path / "lib"])
    assert raised.value.code == "class-not-found"
    assert not planted.imported
    assert PRINTED not in capsys.readouterr().out


def test_a_class_from_the_paths_loads(tmp_path: Path) -> None:
    planted = plant(tmp_path / "lib")
    found = load_streamlet_class(f"{planted.name}:Evil", python_paths=[tmp_path / "lib"])
    assert found.__module__ == planted.name
    assert planted.imported
    assert str(tmp_path / "lib") in sys.path  # so the module's own imports of its siblings work


def test_a_module_that_fails_to_import_is_reported_with_its_place(tmp_path: Path) -> None:
    (tmp_path / "broken_at_import_x.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(ClassLoadError) as raised:
        load_streamlet_class("broken_at_import_x:Thing", python_paths=[tmp_path])
    assert raised.value.code == "class-not-found"
    assert "importing 'broken_at_import_x' failed: ModuleNotFoundError" in raised.value.message
    assert "broken_at_import_x" not in sys.modules
