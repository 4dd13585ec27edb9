"""The wheelhouse a build installs from: made on the host, bind-mounted into the build.

Why on the host: pip runs here, where the index, its proxy and its
certificates are already configured, and its cache keeps TensorFlow from being
downloaded again; the build itself needs no network and installs with
``--no-index``, so no wheel and no pip cache ends up in a layer.

streamflow's own wheel is built from the checkout when streamflow runs from
one (an editable install: the image gets the code as it is now); from a
plain ``pip install streamflow`` it is the installed version, fetched from the
package index like every other wheel.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

import streamflow
from streamflow.cli.images import builders

__all__ = ["TARGET_PYTHON", "link_tree", "streamflow_source", "wheelhouse"]

#: The Python of both bases; wheels made on a host with another Python are fetched for this one.
TARGET_PYTHON = (3, 11)


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


def wheelhouse(source: Path | None, requirements: list[str], key: str) -> Path:
    """Wheels for ``requirements``, made once per key.

    streamflow's own comes from ``source`` (a checkout) or, without one, from
    the package index at the installed version.
    """
    house = builders.images_dir() / "wheels" / key
    if (house / ".complete").is_file():
        return house
    tmp = house.with_name(key + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "--quiet"]
    hint = ""
    if source is not None:
        builders.say("building streamflow's wheel from the checkout ...")
        own = [*pip, "wheel", "--no-deps", "--wheel-dir", str(tmp), str(source)]
        builders.run(own, what="streamflow wheel")
        local = str(next(tmp.glob("streamflow-*.whl")))
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
        fetch = [*pip, "wheel", "--wheel-dir", str(tmp), "--find-links", str(tmp)]
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
    (tmp / ".complete").write_text("\n".join(requirements) + "\n")
    shutil.rmtree(house, ignore_errors=True)
    tmp.rename(house)
    return house
