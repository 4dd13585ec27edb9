"""Artifacts built once per test run and shared by every xdist worker.

Each worker is a session of its own, so a session-scoped fixture that trains a
model ran once per worker: four trainings of each example model on a 2-core
machine, about 15 CPU seconds a worker. `built_once` builds a directory under
the run's shared temporary root, with an exclusive lock: the first worker to
ask builds it, the others wait for it and read the manifest `build` returned.
A directory a worker left half-built (it died mid-way) has no manifest and is
built again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["built_once"]

_MANIFEST = "manifest.json"


def _shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temporary root: a worker's basetemp is `<root>/popen-gwN`."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """The directory `name`, filled by `build(directory)` once per run; and `build`'s manifest.

    The manifest (JSON) is what the other workers learn of the build: file names
    relative to the directory, say.
    """
    root = _shared_root(tmp_path_factory)
    out = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        manifest = out / _MANIFEST
        try:
            return out, json.loads(manifest.read_text())
        except (OSError, ValueError):
            pass  # not built yet, or its builder died: build it (again)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        found = build(out)
        written = out / f"{_MANIFEST}.tmp"
        written.write_text(json.dumps(found))
        os.replace(written, manifest)  # whole or not at all, however the builder ends
        return out, json.loads(manifest.read_text())  # the same keys (text) in every worker
