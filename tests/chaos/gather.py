"""The chaos rows of every worker, gathered into one table on the controller.

Loaded by the root conftest (the controller of a parallel run collects no test,
so it never loads tests/chaos/conftest.py). A worker hands its rows over in
`workeroutput` when its session ends; the controller adds them to its own, and
a serial run simply has its own rows.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import harness

TABLE_ENV = "STREAMFLOW_CHAOS_TABLE"
_ROWS = pytest.StashKey[list[harness.Row]]()
_OUTPUT_KEY = "streamflow_chaos_rows"


def rows(config: pytest.Config) -> list[harness.Row]:
    """This process's rows (a worker's, or the whole run's on the controller)."""
    if _ROWS not in config.stash:
        config.stash[_ROWS] = []
    return config.stash[_ROWS]


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[_OUTPUT_KEY] = [dataclasses.asdict(row) for row in rows(session.config)]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    sent = getattr(node, "workeroutput", {}).get(_OUTPUT_KEY, [])
    rows(node.config).extend(harness.Row(**row) for row in sent)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if hasattr(config, "workerinput"):
        return
    table_rows = sorted(rows(config), key=lambda r: (r.scenario, r.guarantee))
    if not table_rows:
        return
    table = harness.format_table(table_rows)
    terminalreporter.section("chaos suite")
    for line in table.splitlines():
        terminalreporter.write_line(line)
    if path := os.environ.get(TABLE_ENV):
        Path(path).write_text(f"{harness.TABLE_TITLE}\n\n{table}")
        terminalreporter.write_line(f"(written to {path})")
