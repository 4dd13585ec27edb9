"""Where a blueprint's classes may come from: its python_paths and streamflow, nothing else.

A ``class:`` naming any other module (the standard library, site-packages, a
directory that is on ``sys.path`` but not in the blueprint's ``python_paths``)
is a located problem, and the module is never imported: the planted modules
here leave a marker file when their top-level code runs, and the tests assert
there is none.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from streamflow.api.descriptor import ClassLoadError
from streamflow.blueprint import Application, VerifyResult, verify_text
from tests.blueprint.bp_helpers import FIXTURES, only, where
from tests.blueprint.planted import PRINTED, Planted, plant, unique_name

# the class is on line 5, column 12
BLUEPRINT = """\
name: app
schemas: [{schemas}]
streamlets:
  s:
    class: '{cls}'
"""
CLASS_AT = (5, 12)
OUTSIDE = "module-outside-python-paths"
SHADOWING = "shadowing-module"
CLASS_PROBLEMS = {OUTSIDE, SHADOWING, "class-not-found", "not-a-streamlet"}


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """The blueprint's directory: the first (and only) entry of its python_paths."""
    directory = tmp_path / "app"
    directory.mkdir()
    return directory.resolve()


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on ``sys.path`` (restored after the test), outside the python_paths."""
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    return directory


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a class puts the python_paths on ``sys.path``: no test leaves them there."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def verify_class(cls: str, app_dir: Path) -> VerifyResult:
    text = BLUEPRINT.format(schemas=FIXTURES / "schemas", cls=cls)
    return verify_text(text, filename="bp.yaml", base_dir=app_dir)


def no_class_problems(result: VerifyResult) -> bool:
    return not [p for p in result.problems if p.code in CLASS_PROBLEMS]


def assert_never_imported(planted: Planted, capsys: pytest.CaptureFixture[str]) -> None:
    assert not planted.imported, f"{planted.name} was imported"
    assert planted.name not in sys.modules
    assert PRINTED not in capsys.readouterr().out


def test_a_module_on_sys_path_but_not_in_python_paths_is_refused_unimported(
    app_dir: Path, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = plant(elsewhere)
    result = verify_class(f"{planted.name}:Evil", app_dir)
    problem = only(result, OUTSIDE)
    assert where(problem) == CLASS_AT
    assert f"module '{planted.name}'" in problem.message
    assert str(app_dir) in problem.hint  # the paths that were searched
    assert result.application is None
    assert_never_imported(planted, capsys)


@pytest.mark.parametrize(
    "cls",
    [
        "this:X",  # prints the Zen of Python when imported
        "os:system",
        "os.system",
        "json:JSONDecoder",
        "importlib.metadata:Distribution",
        "yaml:SafeLoader",  # installed in site-packages
        "__main__:Evil",
    ],
)
def test_standard_library_and_installed_modules_are_refused(
    cls: str, app_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "this", raising=False)
    module = cls.partition(":")[0] if ":" in cls else cls.rpartition(".")[0]
    problem = only(verify_class(cls, app_dir), OUTSIDE)
    assert where(problem) == CLASS_AT
    assert f"module '{module}'" in problem.message
    assert str(app_dir) in problem.hint
    assert "this" not in sys.modules
    assert "Beautiful is better than ugly" not in capsys.readouterr().out


@pytest.mark.parametrize("cls", ["..x:Foo", ".bp_local:Foo", "a..b:Foo", "1x:Foo", "x-y:Foo"])
def test_names_that_are_not_absolute_module_names_are_refused(cls: str, app_dir: Path) -> None:
    (app_dir / "bp_local.py").write_text("raise SystemExit('imported')\n")
    problem = only(verify_class(cls, app_dir), "class-not-found")
    assert where(problem) == CLASS_AT
    assert repr(cls.partition(":")[0]) in problem.message
    assert str(app_dir) in problem.hint


def test_a_module_found_nowhere_names_the_paths_searched(app_dir: Path) -> None:
    problem = only(verify_class("no_such_module_anywhere_xyz:Thing", app_dir), "class-not-found")
    assert "module 'no_such_module_anywhere_xyz' not found" in problem.message
    assert str(app_dir) in problem.hint


def test_a_symlink_out_of_the_python_paths_is_refused(
    app_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = plant(outside)
    name = unique_name("linked")
    (app_dir / f"{name}.py").symlink_to(planted.file)
    problem = only(verify_class(f"{name}:Evil", app_dir), OUTSIDE)
    assert str(planted.file.resolve()) in problem.message
    assert not planted.imported
    assert name not in sys.modules
    assert PRINTED not in capsys.readouterr().out


def test_a_symlinked_package_out_of_the_python_paths_is_refused(
    app_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = unique_name("pkg")
    init = plant(tmp_path / "outside", f"{package}", file=f"{package}/__init__.py")
    inner = plant(tmp_path / "outside", f"{package}.inner")
    (app_dir / package).symlink_to(init.file.parent)
    problem = only(verify_class(f"{package}.inner:Evil", app_dir), OUTSIDE)
    assert f"its package '{package}'" in problem.message
    assert str(init.file.resolve()) in problem.message
    assert not init.imported and not inner.imported
    assert package not in sys.modules


def test_a_module_in_python_paths_that_shadows_the_standard_library_is_refused(
    app_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = plant(app_dir, "json")  # the standard library's json is loaded already
    problem = only(verify_class("json:Evil", app_dir), SHADOWING)
    assert where(problem) == CLASS_AT
    assert str(planted.file.resolve()) in problem.message
    assert "the standard library's module 'json'" in problem.message
    assert "rename" in problem.hint
    assert not planted.imported


@pytest.mark.parametrize("installed", ["yaml", "iniconfig"])
def test_a_module_in_python_paths_that_shadows_an_installed_one_is_refused(
    installed: str, app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if installed == "iniconfig":  # found in site-packages, not because it is loaded
        monkeypatch.delitem(sys.modules, installed, raising=False)
    ours = plant(app_dir, installed)
    problem = only(verify_class(f"{installed}:Evil", app_dir), SHADOWING)
    assert str(ours.file.resolve()) in problem.message
    assert f"the installed module '{installed}' at " in problem.message
    assert re.search(r"(site|dist)-packages", problem.message)
    assert not ours.imported


def test_a_namesake_of_an_installed_module_loaded_already_is_refused(
    app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    name = unique_name("loaded")
    monkeypatch.setitem(sys.modules, name, yaml)  # as if installed code had loaded it
    ours = plant(app_dir, name)
    problem = only(verify_class(f"{name}:Evil", app_dir), SHADOWING)
    assert f"already loaded from {Path(yaml.__file__).resolve()}" in problem.message
    assert not ours.imported
    assert sys.modules[name] is yaml


def test_a_namesake_on_sys_path_gives_way_to_the_python_paths_one_unimported(
    app_dir: Path, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not installed, only on sys.path: the blueprint's own module is the one its name means."""
    name = unique_name("twin")
    theirs = plant(elsewhere, name)
    ours = plant(app_dir, name)
    assert no_class_problems(verify_class(f"{name}:Evil", app_dir))
    assert ours.imported
    assert not theirs.imported
    assert sys.modules[name].__file__ == str(ours.file.resolve())


def test_a_package_found_only_elsewhere_is_refused_unimported(
    app_dir: Path, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = unique_name("pkg")
    init = plant(elsewhere, package, file=f"{package}/__init__.py")
    inner = plant(elsewhere, f"{package}.mod")
    problem = only(verify_class(f"{package}.mod:Evil", app_dir), OUTSIDE)
    assert f"module '{package}.mod' is not in the python_paths: '{package}' is at " in (
        problem.message
    )
    assert not init.imported and not inner.imported
    assert package not in sys.modules


def test_modules_and_packages_in_python_paths_load(app_dir: Path, tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    regular, namespace = unique_name("regular"), unique_name("namespace")
    planted = [
        plant(app_dir),
        plant(lib, regular, file=f"{regular}/__init__.py"),
        plant(lib, f"{regular}.sub.mod"),
        plant(lib, f"{namespace}.mod"),  # no __init__.py: a namespace package
        plant(lib, f"{namespace}.inner.mod"),  # one inside another, neither loaded yet
    ]
    (lib / regular / "sub" / "__init__.py").write_text("")
    text = (
        f"name: app\nschemas: [{FIXTURES / 'schemas'}]\npython_paths: [{lib}]\nstreamlets:\n"
        f"  a: {{class: '{planted[0].name}:Evil'}}\n"
        f"  b: {{class: '{regular}.sub.mod:Evil'}}\n"
        f"  c: {{class: '{namespace}.inner.mod:Evil'}}\n"
        f"  e: {{class: '{namespace}.mod:Evil'}}\n"
        f"  d: {{class: 'streamflow.streamlets.io:FileEgress'}}\n"
    )
    result = verify_text(text, filename="bp.yaml", base_dir=app_dir)
    assert [p for p in result.problems if p.code in CLASS_PROBLEMS] == []
    assert all(p.imported for p in planted)
    assert sys.modules[f"{regular}.sub.mod"].__file__ == str(planted[2].file.resolve())


def test_the_same_module_is_imported_once(app_dir: Path) -> None:
    planted = plant(app_dir)
    first = verify_class(f"{planted.name}:Evil", app_dir)
    planted.marker.unlink()
    second = verify_class(f"{planted.name}:Evil", app_dir)
    assert [p for p in (*first.problems, *second.problems) if p.code in CLASS_PROBLEMS] == []
    assert not planted.imported  # the second verify used the module the first loaded


def test_another_blueprints_module_of_the_same_name_gives_way(
    app_dir: Path, tmp_path: Path
) -> None:
    """In one process, each blueprint gets its own module, as a process of its own would."""
    other = tmp_path / "other-app"
    first = plant(other)
    assert no_class_problems(verify_class(f"{first.name}:Evil", other))
    second = plant(app_dir, first.name)
    assert no_class_problems(verify_class(f"{first.name}:Evil", app_dir))
    assert second.imported
    assert sys.modules[first.name].__file__ == str(second.file.resolve())


def test_a_namesake_imported_from_a_users_directory_gives_way(
    app_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = plant(tmp_path / "lib")
    spec = importlib.util.spec_from_file_location(first.name, first.file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # as a test, or the application's own code, might
    monkeypatch.setitem(sys.modules, first.name, module)
    second = plant(app_dir, first.name)
    assert no_class_problems(verify_class(f"{first.name}:Evil", app_dir))
    assert second.imported
    assert sys.modules[first.name].__file__ == str(second.file.resolve())


def test_an_application_spec_naming_a_foreign_module_is_refused_at_load(
    app_dir: Path, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replica loads its class from the app spec: a tampered one imports nothing foreign."""
    planted = plant(elsewhere)
    app = Application.from_dict(
        {
            "name": "app",
            "python_paths": [str(app_dir)],
            "streamlets": {"s": {"class": f"{planted.name}:Evil"}},
            "topics": {},
        }
    )
    with pytest.raises(ClassLoadError) as raised:
        app.descriptor("s")
    assert raised.value.code == OUTSIDE
    assert planted.name in raised.value.message
    assert str(app_dir) in raised.value.hint
    assert_never_imported(planted, capsys)


def test_relative_python_paths_of_an_application_spec_resolve_against_the_working_directory(
    app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = plant(app_dir / "lib")
    monkeypatch.chdir(app_dir)
    app = Application.from_dict(
        {
            "name": "app",
            "python_paths": [os.path.join(".", "lib")],
            "streamlets": {"s": {"class": f"{planted.name}:Evil"}},
            "topics": {},
        }
    )
    assert app.descriptor("s").cls.__module__ == planted.name
