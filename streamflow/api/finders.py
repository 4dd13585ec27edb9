"""Finding a module's file in given directories, and elsewhere, without importing anything.

:mod:`streamflow.api.classpath` decides from these answers whether a class
path may be imported. Finding runs no module code: it asks the import
system's finders where a name's file would be, exactly as an ``import``
does before it runs anything.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from collections.abc import Collection, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.importlib import PathEntryFinderProtocol

__all__ = [
    "find_elsewhere",
    "find_in",
    "inside",
    "installation_dirs",
    "installed",
    "installed_module",
    "places",
    "real_places",
    "same",
    "where",
    "where_spec",
]


def find_in(name: str, locations: Sequence[str]) -> ModuleSpec | None:
    """What :class:`~importlib.machinery.PathFinder` finds for ``name`` in ``locations``.

    Done here with the same path-entry finders, because PathFinder makes a
    namespace package's path live: it recomputes it from the parent package's,
    which must be imported first (and a top-level one's from all of sys.path).
    A namespace package found here keeps the portions in ``locations``, fixed.
    """
    portions: list[str] = []
    for location in locations:
        finder = _path_finder(location)
        spec = finder.find_spec(name) if finder is not None else None
        if spec is None:
            continue
        if spec.loader is not None:
            return spec
        portions += spec.submodule_search_locations or []
    if not portions:
        return None
    namespace = ModuleSpec(name, None, is_package=True)
    namespace.submodule_search_locations = portions
    return namespace


def find_elsewhere(
    top: str,
    *,
    excluded: Collection[str],
    ours: list[str] | None = None,
    installed_only: bool = False,
) -> ModuleSpec | None:
    """The module (not a namespace portion) an ordinary ``import top`` could find instead.

    Asks each finder on ``sys.meta_path`` for the name, the path finder over
    the entries of ``sys.path`` whose real paths are not ``excluded`` (and,
    with ``installed_only``, are installation directories: any other finder
    answers for installed code, as an editable install's does). A spec whose
    real places are ``ours`` is the same module, found again.
    """
    entries = [
        entry
        for entry in sys.path
        if isinstance(entry, str)
        and os.path.realpath(entry or os.curdir) not in excluded
        and (not installed_only or installed(entry or os.curdir))
    ]
    for finder in sys.meta_path:
        try:
            if finder is PathFinder:
                spec = find_in(top, entries)
            else:
                find_spec = getattr(finder, "find_spec", None)
                spec = find_spec(top, None) if find_spec is not None else None
        except Exception:  # a finder that cannot answer for this name has no such module
            continue
        if spec is None or spec.origin is None:  # none, or only a namespace portion
            continue
        if real_places(spec) == ours:
            continue
        return spec
    return None


@functools.cache
def installation_dirs() -> tuple[str, ...]:
    """Where the standard library and installed distributions live (site-packages)."""
    paths = sysconfig.get_paths()
    found = [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    found += [*site.getsitepackages(), site.getusersitepackages()]
    return tuple(dict.fromkeys(os.path.realpath(p) for p in found))


def installed(path: str) -> bool:
    """Whether ``path`` lies in an installation directory."""
    return inside(path, installation_dirs())


def installed_module(module: ModuleType) -> bool:
    """Whether a loaded module is installed code: from an installation, built in or frozen."""
    loaded = getattr(module, "__file__", None)
    if loaded:
        return installed(loaded)
    portions = getattr(module, "__path__", None)
    if portions is None:
        return True  # built in, frozen, or made by hand: nothing of a blueprint's
    return any(installed(p) for p in portions)


def inside(path: str, roots: Collection[str]) -> bool:
    """Whether ``path``, symbolic links resolved, lies in one of the (real) ``roots``."""
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(root) for root in roots)


def same(module: ModuleType, spec: ModuleSpec) -> bool:
    """Whether a loaded module is the one ``spec`` would load."""
    loaded = getattr(module, "__file__", None)
    if spec.origin is None:  # a namespace package: it runs no code, whatever its portions
        return loaded is None and hasattr(module, "__path__")
    return loaded is not None and os.path.realpath(loaded) == os.path.realpath(spec.origin)


def places(spec: ModuleSpec) -> list[str]:
    """The file a spec loads, or a namespace package's directories."""
    if spec.origin is not None and spec.has_location:
        return [spec.origin]
    return list(spec.submodule_search_locations or [])


def real_places(spec: ModuleSpec) -> list[str]:
    return [os.path.realpath(p) for p in places(spec)]


def where_spec(spec: ModuleSpec) -> str:
    """Where a spec's module is, for a message."""
    found = real_places(spec)
    return ", ".join(found) if found else f"({spec.origin})"


def where(module: ModuleType) -> str:
    """Where a loaded module came from, for a message."""
    loaded = getattr(module, "__file__", None)
    return os.path.realpath(loaded) if loaded else "(not a file)"


def _path_finder(location: str) -> PathEntryFinderProtocol | None:
    """The finder of one path entry, from the cache the import system keeps, as it does."""
    if location in sys.path_importer_cache:
        return sys.path_importer_cache[location]
    finder: PathEntryFinderProtocol | None = None
    for hook in sys.path_hooks:
        try:
            finder = hook(location)
            break
        except ImportError:
            continue
    sys.path_importer_cache[location] = finder
    return finder
