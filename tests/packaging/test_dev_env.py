"""`./dev env` in fresh checkouts: the first makes the virtualenv and keeps a copy in the
machine's build cache; the second is restored from it, and is its own.

A restored virtualenv is made of hard links to the cache's files, which are the first
checkout's too. What must hold, and what this test would catch:

- the second checkout's ``import streamflow`` is its own tree, not the first one's;
- installing streamflow into the second writes nothing the first (or the cache) reads,
  such as the editable ``.pth``, which an installer could rewrite in place;
- its scripts name its own interpreter, not the place the copy was made in.

Each checkout is a copy of what ``./dev env`` reads (the script, its cache library,
``pyproject.toml``, the wheel's build hook, the README and the package). The installs
come from the package index through uv's cache, as ``./dev`` installs; the extras are
the smallest set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).parents[2]
EXTRAS = "registry"


def _checkout(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "static")
    shutil.copytree(REPO / "streamflow", root / "streamflow", ignore=ignore)
    (root / "tools" / "lib").mkdir(parents=True)
    shutil.copy2(REPO / "tools" / "lib" / "build-cache.sh", root / "tools" / "lib")
    for name_ in ("dev", "pyproject.toml", "README.md", "hatch_build.py"):
        shutil.copy2(REPO / name_, root / name_)
    return root


def _dev_env(root: Path, cache: Path) -> str:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))},
        "STREAMFLOW_BUILD_CACHE": str(cache),
    }
    result = subprocess.run(
        ["./dev", "env", EXTRAS],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"./dev env exited {result.returncode}:\n{output}"
    return output


def _imports_from(root: Path) -> str:
    """Where the checkout's interpreter finds streamflow, run from elsewhere (not its cwd)."""
    python = str(root / ".venv" / "bin" / "python")
    return subprocess.run(
        [python, "-c", "import streamflow; print(streamflow.__file__)"],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


def _editable_pth(venv: Path) -> str:
    [pth] = venv.glob("lib/python*/site-packages/_editable_impl_streamflow.pth")
    return pth.read_text().strip()


def test_a_second_checkout_restores_the_first_ones_virtualenv_and_it_is_its_own(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    first, second = _checkout(tmp_path, "first"), _checkout(tmp_path, "second")

    made = _dev_env(first, cache)
    assert "a copy of this machine's" not in made, made  # nothing to restore yet
    [kept] = cache.glob("venv-*/*")
    assert (kept / ".complete").is_file()

    restored = _dev_env(second, cache)
    assert "a copy of this machine's" in restored, restored

    # hard links: the same files, not a second install
    numpy_init = "lib/python3.11/site-packages/numpy/__init__.py"
    assert (second / ".venv" / numpy_init).samefile(kept / numpy_init)

    assert _imports_from(first) == str(first / "streamflow" / "__init__.py")
    assert _imports_from(second) == str(second / "streamflow" / "__init__.py")
    assert _editable_pth(first / ".venv") == str(first)
    assert _editable_pth(kept) == str(first)  # the cache's copy is as it was made
    assert (second / ".venv" / "bin" / "streamflow").read_text().splitlines()[0] == (
        f"#!{second / '.venv' / 'bin' / 'python'}"
    )
    shebangs = {
        path.name: path.read_text().splitlines()[0]
        for path in (second / ".venv" / "bin").iterdir()
        if path.is_file() and not path.is_symlink() and path.read_bytes()[:2] == b"#!"
    }
    assert shebangs, "no scripts in the restored virtualenv"
    assert not [n for n, line in shebangs.items() if str(first) in line], shebangs

    # and a third `./dev env` in the second checkout has nothing to do
    again = _dev_env(second, cache)
    assert "installing" not in again, again
