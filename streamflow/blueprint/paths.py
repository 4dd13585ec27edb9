"""Where a blueprint's schemas and streamlet modules are looked for.

A blueprint names schemas by full name and classes by ``module:Class``; both
are resolved against search paths. Besides the paths a blueprint lists, the
project's own ``schemas/`` directory is searched, found by walking up from the
blueprint to the project root (the first directory with ``pyproject.toml`` or
``.git``), so the examples in a checkout verify without extra configuration.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["find_project_root", "project_schema_dir", "unique_paths"]

_ROOT_MARKERS = ("pyproject.toml", ".git")


def find_project_root(*, start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds a project marker."""
    here = start.resolve()
    for directory in (here, *here.parents):
        if any((directory / marker).exists() for marker in _ROOT_MARKERS):
            return directory
    return None


def project_schema_dir(*, start: Path) -> Path | None:
    """``<project root>/schemas`` if it exists."""
    root = find_project_root(start=start)
    if root is None:
        return None
    candidate = root / "schemas"
    return candidate if candidate.is_dir() else None


def unique_paths(paths: list[Path]) -> list[Path]:
    """Resolved paths in their first order, without repeats."""
    out: list[Path] = []
    for path in paths:
        resolved = path.resolve()
        if resolved not in out:
            out.append(resolved)
    return out
