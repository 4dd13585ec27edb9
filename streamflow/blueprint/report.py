"""Collecting problems while verifying: one reporter per blueprint file.

Every pass of the verifier appends to the same reporter instead of raising,
so a user sees all that is wrong with a blueprint in one run.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from streamflow.blueprint.problems import Position, Problem, Severity
from streamflow.blueprint.yamlload import Node

__all__ = ["Reporter", "closest", "did_you_mean"]


class Reporter:
    """Problems found in one blueprint; positions default to the blueprint file."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def at(self, where: Node | Position | None) -> Position:
        if isinstance(where, Position):
            return where
        if where is None:
            return Position(self.file)
        return where.position(self.file)

    def error(
        self, code: str, message: str, where: Node | Position | None, *, hint: str = ""
    ) -> None:
        self.problems.append(Problem(code, message, self.at(where), hint))

    def warning(
        self, code: str, message: str, where: Node | Position | None, *, hint: str = ""
    ) -> None:
        self.problems.append(Problem(code, message, self.at(where), hint, Severity.WARNING))

    def extend(self, problems: Iterable[Problem]) -> None:
        self.problems.extend(problems)


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``word``, if any is close enough to be a likely typo."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A hint naming the closest candidate, or an empty string."""
    match = closest(word, candidates)
    return f"did you mean `{match}`?" if match else ""
