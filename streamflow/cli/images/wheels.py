"""The wheelhouse a build installs from: made on the host, bind-mounted into the build.

Why on the host: pip runs here, where the index, its proxy and its
certificates are already configured, and its cache keeps TensorFlow from being
downloaded again; the build itself needs no network and installs with
``--no-index``, so no wheel and no pip cache ends up in a layer.

streamflow's own wheel is built from the checkout when streamflow runs from
one (an editable install: the image gets the code as it is now); from a
plain ``pip install streamflow`` it is the installed version, fetched from the
package index like every other wheel.

Two directories under ``wheels/``: ``streamflow-CONTENT`` holds the
checkout's own wheel, made again on every edit, and ``deps-KEY`` the
third-party wheels (TensorFlow's among them), keyed on the requirements and
Python/platform alone, so an edit fetches nothing. :func:`prune` drops the
directories a build no longer uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import streamflow
from streamflow.cli.images import builders

__all__ = [
    "TARGET_PYTHON",
    "Keys",
    "keys",
    "link_tree",
    "prune",
    "streamflow_source",
    "wheelhouse",
]

#: The Python of both bases; wheels made on a host with another Python are fetched for this one.
TARGET_PYTHON = (3, 11)
DAY = 24 * 3600


def streamflow_source() -> Path | None:
    """The checkout streamflow runs from (an editable install), or None for an installed wheel."""
    root = Path(streamflow.__file__).resolve().parent.parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return root if project.get("project", {}).get("name") == "streamflow" else None


def link_tree(source: Path, files: list[str], target: Path) -> None:
    """Hard-link ``files`` of ``source`` under ``target`` (copies across filesystems)."""
    for rel in files:
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source / rel, dest)
        except OSError:  # another filesystem: copy
            shutil.copy2(source / rel, dest)


def _pinned(requirement: str) -> str:
    # streamflow[k8s,tf] -> streamflow[k8s,tf]==0.1.0: the image gets the version installed here
    if requirement == "streamflow" or requirement.startswith("streamflow["):
        return f"{requirement}=={streamflow.__version__}"
    return requirement


@dataclass(frozen=True)
class Keys:
    """The wheelhouse's two directories: streamflow's own wheel, and everything it needs."""

    own: str | None  # the checkout's wheel, per its content; None: the index's, with the rest
    deps: str  # the third-party wheels: per requirements, Python and platform, never per edit


def keys(source: Path | None, requirements: list[str], *, content: str) -> Keys:
    """Where the wheels go: an edit to streamflow's code re-makes its wheel, not TensorFlow's."""
    parts = [
        *requirements,
        f"python {TARGET_PYTHON}",
        f"host {sys.version_info[:2]} {sys.platform}",
    ]
    if source is None:  # the index's streamflow, pinned to this version, resolves the rest
        parts.append(f"streamflow=={streamflow.__version__}")
    else:  # the checkout's declared dependencies resolve the extras
        project = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        declared = {
            "deps": project.get("dependencies", []),
            **project.get("optional-dependencies", {}),
        }
        parts.append(json.dumps(declared, sort_keys=True))
    deps = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return Keys(None if source is None else content[:16], deps)


def _made(house: Path, make: Callable[[Path], None]) -> Path:
    """``house``, made by ``make`` (into a temporary directory) unless it is complete already.

    Two builds on one machine may make the same house at once: each makes its own
    temporary directory, and the first to finish puts its in place (a complete
    house is never removed, so a build that found one can use it throughout).
    """
    if (house / ".complete").is_file():
        (house / ".complete").touch()  # used: what prune goes by
        return house
    house.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{house.name}.", suffix=".tmp", dir=house.parent))
    try:
        make(tmp)
        (tmp / ".complete").write_text("")
        if not (house / ".complete").is_file():
            shutil.rmtree(house, ignore_errors=True)  # an interrupted one's leftovers
            try:
                tmp.rename(house)
            except OSError:
                if not (house / ".complete").is_file():  # not another build's, just made
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return house


def wheelhouse(source: Path | None, requirements: list[str], key: Keys) -> list[Path]:
    """The wheels for ``requirements``; each directory is made once per key, and others pruned.

    streamflow's own comes from ``source`` (a checkout) or, without one, from
    the package index at the installed version.
    """
    root = builders.images_dir() / "wheels"
    pip = [sys.executable, "-m", "pip", "--quiet"]
    own: Path | None = None
    if key.own is not None and source is not None:
        checkout = source

        def build_own(tmp: Path) -> None:
            builders.say("building streamflow's wheel from the checkout ...")
            command = [*pip, "wheel", "--no-deps", "--wheel-dir", str(tmp), str(checkout)]
            builders.run(command, what="streamflow wheel")

        own = _made(root / f"streamflow-{key.own}", build_own)

    def fetch_deps(tmp: Path) -> None:
        _fetch(pip, own, requirements, tmp)

    deps = _made(root / f"deps-{key.deps}", fetch_deps)
    prune(root, keep=[d for d in (own, deps) if d is not None])
    found = [*(own.glob("*.whl") if own else ()), *deps.glob("*.whl")]
    return sorted(found, key=lambda wheel: wheel.name)


def _fetch(pip: list[str], own: Path | None, requirements: list[str], tmp: Path) -> None:
    """Every wheel but the checkout's own: with one, it only resolves the extras."""
    hint = ""
    if own is not None:
        local = str(next(own.glob("streamflow-*.whl")))
        # the checkout's wheel stands in for "streamflow": pip resolves its extras from it
        reqs = [
            local + r.removeprefix("streamflow") if r.startswith("streamflow[") else r
            for r in requirements
        ]
    else:
        reqs = [_pinned(r) for r in requirements]
        hint = (
            f"streamflow {streamflow.__version__} is not a checkout, so its wheel comes from "
            "the package index; run build from a checkout (pip install -e .) otherwise."
        )
    if sys.version_info[:2] == TARGET_PYTHON and sys.platform == "linux":
        fetch = [*pip, "wheel", "--wheel-dir", str(tmp)]
    else:  # another host: binary wheels for the image's Python and platform
        version = ".".join(map(str, TARGET_PYTHON))
        fetch = [
            *pip,
            "download",
            "--dest",
            str(tmp),
            "--only-binary=:all:",
            "--python-version",
            version,
            "--platform",
            "manylinux2014_x86_64",
        ]
    builders.say(f"fetching wheels for {', '.join(requirements)} (pip's cache keeps them) ...")
    builders.run([*fetch, *reqs], what="wheels", hint=hint)
    if own is not None:  # pip copies the local wheel too: it lives in its own directory
        for copied in tmp.glob("streamflow-*.whl"):
            copied.unlink()


def prune(root: Path, *, keep: list[Path]) -> None:
    """Drop the wheel directories a build no longer uses: they hold TensorFlow, and pile up.

    A superseded streamflow wheel goes at once; another set of requirements'
    wheels (another application's) only after a week unused, and an
    interrupted one after a day.
    """
    now = time.time()
    for house in root.iterdir() if root.is_dir() else ():
        if house in keep or not house.is_dir():
            continue
        marker = house / ".complete"
        used = (marker if marker.is_file() else house).stat().st_mtime
        if house.name.endswith(".tmp"):
            stale = now - used > DAY
        elif house.name.startswith("deps-"):
            stale = now - used > 7 * DAY
        else:  # a superseded streamflow wheel, or a wheelhouse of the old, one-directory kind
            stale = True
        if stale:
            builders.say(f"removing the unused wheels {house}")
            shutil.rmtree(house, ignore_errors=True)
