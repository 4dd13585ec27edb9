"""Helpers for blueprint tests: verify inline YAML next to the fixture streamlets."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from streamflow.blueprint import Problem, VerifyResult, verify_text

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[2] / "blueprints" / "wine" / "blueprint.yaml"


def verify(text: str, **kwargs: Any) -> VerifyResult:
    """Verify dedented YAML as the file ``bp.yaml`` in the fixtures directory."""
    return verify_text(
        textwrap.dedent(text).lstrip("\n"), filename="bp.yaml", base_dir=FIXTURES, **kwargs
    )


def only(result: VerifyResult, code: str) -> Problem:
    """The one problem with ``code``; fails showing every problem otherwise."""
    found = [p for p in result.problems if p.code == code]
    assert len(found) == 1, f"expected one {code}, got: {result.problems}"
    return found[0]


def where(problem: Problem) -> tuple[int, int]:
    return problem.position.line, problem.position.column
