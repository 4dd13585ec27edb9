"""Problems: what the verifier finds, as values rather than exceptions.

Each problem has a stable kebab-case ``code`` that scripts and tests can rely
on, a message for people, a position in the blueprint, and an optional hint.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["Position", "Problem", "Severity", "has_errors"]


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Position:
    file: str
    line: int = 1
    column: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Problem:
    code: str
    message: str
    position: Position
    hint: str = ""
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        text = f"{self.position}: {self.severity.value}[{self.code}]: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "file": self.position.file,
            "line": self.position.line,
            "column": self.position.column,
            "hint": self.hint,
        }


def has_errors(problems: list[Problem]) -> bool:
    return any(p.severity is Severity.ERROR for p in problems)
