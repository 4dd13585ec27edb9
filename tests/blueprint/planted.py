"""Modules that leave a mark when imported: proof that the verifier never imported them.

A planted module writes a marker file and prints a line as soon as its
top-level code runs, and defines ``Evil``, a streamlet that would verify, so
a loader that imports it cannot fail for any other reason. Each gets a name
of its own, so no test finds another's module already loaded.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PRINTED", "Planted", "plant", "unique_name"]

PRINTED = "planted module imported"

_SOURCE = """\
import pathlib

pathlib.Path({marker!r}).write_text("imported")
print({printed!r})

from streamflow import Outlet, Streamlet


class Evil(Streamlet):
    out = Outlet(schema="tests.fixtures.Reading")

    def source(self):
        yield {{"id": "a", "value": 1.0}}
"""


@dataclass(frozen=True)
class Planted:
    name: str
    file: Path
    marker: Path

    @property
    def imported(self) -> bool:
        return self.marker.exists()


def unique_name(prefix: str = "planted") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def plant(directory: Path, name: str | None = None, *, file: str | None = None) -> Planted:
    """A module ``name`` in ``directory`` (as ``file``, default ``<name>.py``), not yet imported."""
    name = name or unique_name()
    path = directory / (file or f"{name.replace('.', '/')}.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    marker = directory.parent / f"{name}.{uuid.uuid4().hex[:6]}.imported"
    path.write_text(_SOURCE.format(marker=str(marker), printed=PRINTED), encoding="utf-8")
    return Planted(name, path, marker)
