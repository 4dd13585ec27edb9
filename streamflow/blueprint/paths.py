"""Where a blueprint's schemas and streamlet modules are looked for.

A blueprint names schemas by full name and classes by ``module:Class``; both
are resolved against search paths. Besides the paths a blueprint lists, every
``schemas/`` directory next to the blueprint or above it, up to the project
root (the first directory with ``pyproject.toml`` or ``.git``), is searched,
so the examples in a checkout verify without extra configuration.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["find_project_root", "project_schema_dir", "project_schema_dirs", "unique_paths"]

_ROOT_MARKERS = ("pyproject.toml", ".git")


def find_project_root(*, start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds a project marker."""
    here = start.resolve()
    for directory in (here, *here.parents):
        if any((directory / marker).exists() for marker in _ROOT_MARKERS):
            return directory
    return None


def project_schema_dirs(*, start: Path) -> list[Path]:
    """Every ``schemas/`` directory from ``start`` up to the project root, nearest first.

    Without a project root only ``start/schemas`` counts, so that a blueprint
    outside any project never picks up an unrelated ``schemas/`` higher up.
    """
    here = start.resolve()
    root = find_project_root(start=here)
    chain = [here] if root is None else [d for d in (here, *here.parents) if d.is_relative_to(root)]
    return [d / "schemas" for d in chain if (d / "schemas").is_dir()]


def project_schema_dir(*, start: Path) -> Path | None:
    """The nearest of :func:`project_schema_dirs`, if any."""
    found = project_schema_dirs(start=start)
    return found[0] if found else None


def unique_paths(paths: list[Path]) -> list[Path]:
    """Resolved paths in their first order, without repeats."""
    out: list[Path] = []
    for path in paths:
        resolved = path.resolve()
        if resolved not in out:
            out.append(resolved)
    return out
