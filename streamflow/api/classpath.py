"""From a blueprint's ``module:Class`` to a class, importing only what the blueprint vouches for.

A blueprint is data, but its ``class:`` lines name code, and importing a
module runs its top-level code. So a class comes from one of two places only:
the streamflow package (the built-in streamlets) and the blueprint's own
``python_paths`` (its directory first). A module anywhere else (the standard
library, site-packages, a directory that happens to be on ``sys.path``) is
refused before anything is imported. The module's file is found as
:class:`importlib.machinery.PathFinder` finds it, over those paths alone
(:mod:`streamflow.api.finders`); its real path, symbolic links resolved, must
lie inside one of them, and so must every package above it. The module then
runs from exactly the file that was checked: it is never looked up again
through ``sys.path``.

A module in the python_paths with the name of a standard-library or an
installed module (site-packages, loaded or not) is refused too rather than
imported: one name would mean two modules in one process, and whichever
loaded first would silently win for every other importer, streamflow's own
imports included; the fix is to rename it. A module of that name from
another directory of the user's (another blueprint's, in a process that
verifies several, or one on PYTHONPATH) gives way instead: the python_paths
come first on ``sys.path``, so the blueprint's own module is the one its
name means, as in a process of its own.

Every place that turns a class path into a class (the verifier, an
Application's descriptors in a replica, ``describe``, ``build``, the
operator's verifier) calls :func:`load_streamlet_class`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from types import ModuleType

from streamflow.api import finders
from streamflow.api.streamlet import Streamlet

__all__ = ["NOT_FOUND", "OUTSIDE", "SHADOWING", "ClassLoadError", "load_streamlet_class"]

NOT_FOUND = "class-not-found"
OUTSIDE = "module-outside-python-paths"
SHADOWING = "shadowing-module"
_PACKAGE = "streamflow"

# A module is in sys.modules before its code has run; one load at a time keeps
# another thread from finding it half made.
_lock = threading.RLock()


class ClassLoadError(Exception):
    """``module:Class`` that cannot be loaded; ``code`` is a verifier problem code."""

    def __init__(self, code: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint


def load_streamlet_class(
    class_path: str,
    *,
    python_paths: Sequence[str | os.PathLike[str]],
    option: str = "python_paths",
) -> type[Streamlet]:
    """The Streamlet class at ``module:Class`` (or ``module.Class``).

    The module must be streamflow's or lie under ``python_paths`` (relative
    ones are taken from the working directory); anything else is a
    :class:`ClassLoadError`, and is not imported. ``option`` is what the
    user calls the paths in messages (``describe`` calls them ``--path``).
    """
    search = _Search.of(python_paths, option)
    module_name, attr = _split(class_path, search)
    with _lock:
        try:
            module = _import(module_name, search)
        except ClassLoadError:
            raise
        except Exception as exc:
            raise ClassLoadError(
                NOT_FOUND, f"importing {module_name!r} failed: {_last_frame(exc)}"
            ) from None
    target = getattr(module, attr, None)
    if target is None:
        # what the module exports (a package may load some on first use), else all it has
        names = getattr(module, "__all__", None) or list(vars(module))
        candidates = [
            n
            for n in names
            if inspect.isclass(v := getattr(module, n, None))
            and issubclass(v, Streamlet)
            and v is not Streamlet
        ]
        hint = f"streamlets in {module_name}: {', '.join(sorted(candidates))}" if candidates else ""
        raise ClassLoadError(NOT_FOUND, f"{module_name} has no attribute {attr!r}", hint)
    if not (inspect.isclass(target) and issubclass(target, Streamlet)):
        raise ClassLoadError(
            "not-a-streamlet",
            f"{class_path} is a {type(target).__name__}, not a Streamlet subclass",
            "subclass streamflow.Streamlet",
        )
    return target


@dataclass(frozen=True)
class _Search:
    """The python paths, real and absolute, in their order, and how messages name them."""

    roots: tuple[str, ...]
    option: str

    @classmethod
    def of(cls, paths: Sequence[str | os.PathLike[str]], option: str) -> _Search:
        roots = dict.fromkeys(os.path.realpath(os.fspath(p)) for p in paths)
        return cls(tuple(roots), option)

    @property
    def paths(self) -> str:
        """The paths in words: a blueprint's python_paths, or describe's directories."""
        if self.option.startswith("--"):
            return f"the directories of {self.option}"
        return f"the {self.option}"

    @property
    def remedy(self) -> str:
        if self.option.startswith("--"):
            return f"pass its directory with {self.option}"
        return f"add its directory to {self.option}"

    @property
    def searched(self) -> str:
        return f"searched: {', '.join(self.roots)}" if self.roots else f"no {self.option} given"

    def holds(self, path: str) -> bool:
        return finders.inside(path, self.roots)


def _split(class_path: str, search: _Search) -> tuple[str, str]:
    module_name, colon, attr = class_path.partition(":")
    if not colon:
        module_name, _, attr = class_path.rpartition(".")
    if not module_name or not attr:
        raise ClassLoadError(
            NOT_FOUND,
            f"{class_path!r} is not of the form 'module:Class'",
            "write the class as module.path:ClassName",
        )
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise ClassLoadError(
            NOT_FOUND,
            f"{module_name!r} is not a module name: give its full dotted name, "
            "without leading dots",
            f"a module of the streamflow package or under {search.paths} ({search.searched})",
        )
    return module_name, attr


def _import(name: str, search: _Search) -> ModuleType:
    if name == _PACKAGE or name.startswith(_PACKAGE + "."):
        return _import_own(name)
    for root in reversed(search.roots):  # so the module's own imports find its siblings
        if root not in sys.path:
            sys.path.insert(0, root)
    specs = _find(name, search)
    module = None
    for spec in specs:
        module = _load(spec, name, search)
    assert module is not None  # a name has at least one part
    return module


def _import_own(name: str) -> ModuleType:
    """A module of streamflow itself: its package is loaded already, from where it is installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise ClassLoadError(
                NOT_FOUND,
                f"module {name!r} not found in the streamflow package",
                "check the module path; `streamflow describe MODULE:CLASS` shows a class",
            ) from None
        raise


def _find(name: str, search: _Search) -> list[ModuleSpec]:
    """The specs of ``name`` and each package above it, all checked, none imported."""
    parts = name.split(".")
    locations = list(search.roots)
    specs: list[ModuleSpec] = []
    for depth in range(1, len(parts) + 1):
        prefix = ".".join(parts[:depth])
        spec = finders.find_in(prefix, locations)
        if spec is None:
            raise _missing(name, prefix, search)
        places = finders.places(spec)
        if not places:  # no file and no directory: a finder of another kind answered
            raise ClassLoadError(
                OUTSIDE,
                f"module {name!r}: {prefix!r} is not a file in {search.paths}",
                _outside_hint(search),
            )
        outside = [p for p in places if not search.holds(p)]
        if outside:
            package = "" if prefix == name else f"its package {prefix!r}: "
            raise ClassLoadError(
                OUTSIDE,
                f"module {name!r} is not in {search.paths}: {package}{outside[0]} "
                f"resolves to {os.path.realpath(outside[0])}, outside them",
                _outside_hint(search),
            )
        if depth == 1:
            _check_unshadowed(name, spec, search)
        specs.append(spec)
        locations = list(spec.submodule_search_locations or [])
        if depth < len(parts) and spec.submodule_search_locations is None:
            raise ClassLoadError(
                NOT_FOUND,
                f"module {name!r} not found: {prefix!r} is a module, not a package",
                f"check the module path ({search.searched})",
            )
    return specs


def _missing(name: str, prefix: str, search: _Search) -> ClassLoadError:
    """Not under the python paths: refused if it is elsewhere, else simply not found."""
    top = prefix.partition(".")[0]
    where = _elsewhere(top, search) if prefix == top else None
    if where is None:
        return ClassLoadError(
            NOT_FOUND,
            f"module {name!r} not found",
            f"{search.searched}; check the module path, or {search.remedy}",
        )
    subject = "it" if top == name else repr(top)
    return ClassLoadError(
        OUTSIDE,
        f"module {name!r} is not in {search.paths}: {subject} {where}",
        _outside_hint(search),
    )


def _outside_hint(search: _Search) -> str:
    return (
        f"streamlet classes are imported only from the streamflow package and "
        f"{search.paths} ({search.searched}): move the module there, or {search.remedy}"
    )


def _elsewhere(top: str, search: _Search) -> str | None:
    """Where a top-level module outside the python paths is, in words; None: nowhere."""
    if top in sys.builtin_module_names:
        return "is a built-in module"
    if top in sys.stdlib_module_names:
        return "is in the standard library"
    loaded = sys.modules.get(top)
    if loaded is not None:
        return f"is loaded already, from {finders.where(loaded)}"
    spec = finders.find_elsewhere(top, excluded=search.roots)
    return f"is at {finders.where_spec(spec)}" if spec is not None else None


def _check_unshadowed(name: str, spec: ModuleSpec, search: _Search) -> None:
    """Refuse a top-level module of the python paths that has another module's name."""
    top = spec.name
    other: str | None = None
    if top in sys.builtin_module_names:
        other = f"the built-in module {top!r}"
    elif top in sys.stdlib_module_names:
        other = f"the standard library's module {top!r}"
    else:
        found = finders.find_elsewhere(
            top, excluded=search.roots, ours=finders.real_places(spec), installed_only=True
        )
        if found is not None:
            other = f"the installed module {top!r} at {finders.where_spec(found)}"
    if other is not None:
        raise _shadowing(name, spec, other, search)


def _shadowing(name: str, spec: ModuleSpec, other: str, search: _Search) -> ClassLoadError:
    ours = ", ".join(finders.real_places(spec))
    return ClassLoadError(
        SHADOWING,
        f"module {name!r}: {ours} in {search.paths} has the name of {other}, "
        "so it is not imported (one name cannot mean two modules in one process)",
        f"rename the module in {search.paths}, and the class paths that name it",
    )


def _load(spec: ModuleSpec, name: str, search: _Search) -> ModuleType:
    """The module of a checked spec: the one loaded already from that place, or run now.

    A module of that name loaded already from an installation is refused. One
    loaded from another directory of the user's (another blueprint's, in a
    process that loads several) gives way to this blueprint's own, and its
    submodules are forgotten, as a process of its own would have it.
    """
    existing = sys.modules.get(spec.name)
    if existing is not None:
        if finders.same(existing, spec):
            return existing
        if finders.installed_module(existing):
            where = f"the module already loaded from {finders.where(existing)}"
            raise _shadowing(name, spec, where, search)
        for submodule in [m for m in sys.modules if m.startswith(spec.name + ".")]:
            del sys.modules[submodule]
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        if spec.loader is not None:
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    parent, _, child = spec.name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return sys.modules[spec.name]


def _last_frame(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
