"""The streamflow image installs ``streamflow[k8s]`` and nothing else: the CLI must start there.

Installing that into a fresh venv would take minutes, so the test simulates it:
it works out which installed distributions ``streamflow[k8s]`` pulls in (the
closure of pyproject.toml's requirements over the installed metadata), then
runs the CLI in a subprocess where importing any other distribution's modules
fails, as it would in the image. A module-level ``import numpy`` with numpy
only in an extra is exactly what this catches.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("k8s",)

_BLOCKER = """
import importlib.abc, json, sys
blocked = set(json.loads(sys.argv[1]))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ImportError(f"No module named {name!r} (not in streamflow[k8s])", name=name)
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["streamflow", *sys.argv[2:]]
from streamflow.cli.main import main
main()
"""


def _closure(requirements: list[Requirement], extras: tuple[str, ...]) -> set[str]:
    seen: set[str] = set()
    todo = [(r, extras) for r in requirements]
    while todo:
        req, wanted = todo.pop()
        env_ok = req.marker is None or any(
            req.marker.evaluate({"extra": extra}) for extra in (*wanted, "")
        )
        name = canonicalize_name(req.name)
        if not env_ok or name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue  # not installed here: nothing of it can be imported anyway
        todo += [(Requirement(r), tuple(req.extras)) for r in dist.requires or ()]
    return seen


def _blocked_modules() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in EXTRAS:
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    allowed = _closure(wanted, EXTRAS) | {"streamflow"}
    blocked = set()
    for module, dists in md.packages_distributions().items():
        if module.isidentifier() and not {canonicalize_name(d) for d in dists} & allowed:
            blocked.add(module)
    return sorted(blocked - set(sys.stdlib_module_names))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", _BLOCKER, json.dumps(_blocked_modules()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_extras_modules_are_really_blocked() -> None:
    blocked = _blocked_modules()
    assert "tensorflow" in blocked
    assert "kubernetes" not in blocked


@pytest.mark.parametrize(
    "args", [("--help",), ("streamlet", "run", "--help"), ("operator", "run", "--help")]
)
def test_the_cli_starts_with_only_streamflow_k8s(args: tuple[str, ...]) -> None:
    result = _cli(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Usage" in result.stdout
