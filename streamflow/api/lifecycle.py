"""The methods the runtime calls on a streamlet, and whether a class defines them callably.

The runtime calls a streamlet's lifecycle and logic methods with fixed
arguments (``setup(context)``, ``process(record)``, ``on_control(inlet,
record)``, ...). A method defined with other parameters imports and describes
fine, and then raises ``TypeError`` in every replica, which restarts and raises
again. So the verifier asks here, without running anything, whether each
method the class defines accepts the call the runtime will make; a mistake is
reported at the ``def`` line with the signature expected.

The check is a bind of the runtime's arguments to the method's signature, so
extra parameters with defaults, ``*args`` and ``**kwargs`` are all accepted:
only a call that would fail is a problem.
"""

from __future__ import annotations

import inspect
import linecache
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["EXPECTED", "SignatureProblem", "check_signatures"]

#: Each method the runtime may call, with the arguments it passes (after ``self``).
EXPECTED: Mapping[str, tuple[str, ...]] = {
    "setup": ("context",),
    "teardown": (),
    "process": ("record",),
    "process_batch": ("records",),
    "source": (),
    "serve": ("emitter",),
    "on_control": ("inlet", "record"),
    "between_batches": (),
    "accepts_data": (),
}


@dataclass(frozen=True)
class SignatureProblem:
    """A method the runtime cannot call as it will; where it is, and what it should be."""

    method: str
    found: str
    expected: str
    reason: str
    file: str
    line: int
    column: int


def expected_signature(method: str) -> str:
    """``setup(self, context)``: the parameters the runtime's call binds to."""
    return f"{method}({', '.join(('self', *EXPECTED[method]))})"


def check_signatures(cls: type) -> list[SignatureProblem]:
    """A problem for each lifecycle or logic method of ``cls`` the runtime cannot call.

    Methods inherited from the streamflow package are trusted (and are tested);
    only those a user's class (or a base of theirs) defines are checked.
    """
    problems = []
    for name, arguments in EXPECTED.items():
        owner = _defining_class(cls, name)
        if owner is None or owner.__module__.split(".")[0] == "streamflow":
            continue
        raw = inspect.getattr_static(owner, name)
        problem = _check(name, raw, arguments)
        if problem is not None:
            problems.append(problem)
    return problems


def _defining_class(cls: type, name: str) -> type | None:
    return next((klass for klass in cls.__mro__ if name in vars(klass)), None)


def _check(name: str, raw: Any, arguments: tuple[str, ...]) -> SignatureProblem | None:
    if isinstance(raw, staticmethod):
        function, bound = raw.__func__, arguments
    elif isinstance(raw, classmethod):
        function, bound = raw.__func__, ("cls", *arguments)
    else:
        function, bound = raw, ("self", *arguments)
    if not callable(function):
        return _problem(name, function, found="not a method", reason="it is not a method")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: not ours
        return None
    try:
        signature.bind(*bound)
    except TypeError as exc:
        return _problem(name, function, found=f"{name}{signature}", reason=str(exc))
    return None


def _problem(name: str, function: Any, *, found: str, reason: str) -> SignatureProblem:
    file, line, column = _where(function)
    return SignatureProblem(
        method=name,
        found=found,
        expected=expected_signature(name),
        reason=reason,
        file=file,
        line=line,
        column=column,
    )


def _where(function: Any) -> tuple[str, int, int]:
    """The ``def`` of ``function``: its file (relative to the working directory when
    under it), line and column, both from 1. Decorators are looked past."""
    target: Callable[..., Any] = inspect.unwrap(function) if callable(function) else function
    code = getattr(target, "__code__", None)
    if code is None:
        return "<unknown>", 1, 1
    path = Path(code.co_filename)
    line = code.co_firstlineno
    for offset in range(0, 50):  # co_firstlineno is the first decorator's line
        text = linecache.getline(str(path), line + offset)
        if not text:
            break
        stripped = text.lstrip()
        if stripped.startswith(("def ", "async def ")):
            line += offset
            return _shown(path), line, len(text) - len(stripped) + 1
    return _shown(path), line, 1


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
