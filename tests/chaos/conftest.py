"""The chaos suite's table: every scenario's counts, printed at the end of the session.

Each scenario appends a `harness.Row` to the session's table (kept in the
pytest config's stash), whether its counts held or not. At the end of the
session the table is printed, and written as Markdown to the file that
``$STREAMFLOW_CHAOS_TABLE`` names, if it names one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos import harness

TABLE_ENV = "STREAMFLOW_CHAOS_TABLE"
_TABLE = pytest.StashKey[list[harness.Row]]()


@pytest.fixture
def chaos_table(request: pytest.FixtureRequest) -> list[harness.Row]:
    """The session's rows; a scenario appends its own."""
    stash = request.config.stash
    if _TABLE not in stash:
        stash[_TABLE] = []
    return stash[_TABLE]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    rows = config.stash.get(_TABLE, [])
    if not rows:
        return
    table = harness.format_table(rows)
    terminalreporter.section("chaos suite")
    for line in table.splitlines():
        terminalreporter.write_line(line)
    if path := os.environ.get(TABLE_ENV):
        Path(path).write_text(f"{harness.TABLE_TITLE}\n\n{table}")
        terminalreporter.write_line(f"(written to {path})")
