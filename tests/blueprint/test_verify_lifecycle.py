"""The verifier's signature check: a lifecycle or logic method the runtime cannot call
is a problem at its ``def``, with the signature the runtime expects, before any replica runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamflow.blueprint import Problem
from streamflow.cli.main import app
from tests.blueprint.bp_helpers import FIXTURES, verify

MODULE = FIXTURES / "bp_lifecycle_streamlets.py"

# Each class carries one mistake: (class, method, the runtime's call).
MISTAKES = [
    ("SetupWithoutContext", "setup", "setup(self, context)"),
    ("ProcessWithoutRecord", "process", "process(self, record)"),
    ("ProcessBatchWithTwoArguments", "process_batch", "process_batch(self, records)"),
    ("SourceWithArgument", "source", "source(self)"),
    ("ServeWithoutEmitter", "serve", "serve(self, emitter)"),
    ("OnControlWithOneArgument", "on_control", "on_control(self, inlet, record)"),
    ("BetweenBatchesWithArgument", "between_batches", "between_batches(self)"),
]


def _def_line(cls: str, method: str) -> tuple[int, int]:
    """Where ``def method`` is inside ``class cls`` of the fixture module (1-based)."""
    lines = MODULE.read_text().splitlines()
    start = lines.index(f"class {cls}(Streamlet):")
    for number, text in enumerate(lines[start:], start=start + 1):
        stripped = text.lstrip()
        if stripped.startswith((f"def {method}(", f"async def {method}(")):
            return number, len(text) - len(stripped) + 1
    raise AssertionError(f"no def {method} in {cls}")


def _blueprint(cls: str) -> str:
    return f"""\
name: app
schemas: [schemas]
streamlets:
  bad:
    class: bp_lifecycle_streamlets:{cls}
"""


def _signature_problems(cls: str) -> list[Problem]:
    result = verify(_blueprint(cls))
    assert not result.valid
    return [p for p in result.problems if p.code == "invalid-signature"]


@pytest.mark.parametrize(("cls", "method", "expected"), MISTAKES)
def test_a_wrong_signature_is_reported_at_its_def(cls: str, method: str, expected: str) -> None:
    [problem] = _signature_problems(cls)
    assert Path(problem.position.file).resolve() == MODULE.resolve()
    assert (problem.position.line, problem.position.column) == _def_line(cls, method)
    assert f"bp_lifecycle_streamlets:{cls}.{method}" in problem.message
    assert f"the runtime calls {expected}" in problem.message
    assert expected in problem.hint


@pytest.mark.parametrize("cls", ["Lenient", "GoodServe"])
def test_signatures_that_take_the_call_pass(cls: str) -> None:
    result = verify(_blueprint(cls))
    assert [p for p in result.problems if p.code == "invalid-signature"] == []


def test_verify_prints_the_problem_as_file_line_col(tmp_path: Path) -> None:
    blueprint = tmp_path / "app.yaml"
    text = _blueprint("SetupWithoutContext")
    text = text.replace("schemas: [schemas]", f"schemas: [{FIXTURES / 'schemas'}]")
    blueprint.write_text(f"python_paths: [{FIXTURES}]\n{text}")
    result = CliRunner().invoke(app, ["verify", str(blueprint)])
    assert result.exit_code == 1
    line, column = _def_line("SetupWithoutContext", "setup")
    assert f"bp_lifecycle_streamlets.py:{line}:{column}: error[invalid-signature]" in result.stdout
    assert "setup(self, context)" in result.stdout
