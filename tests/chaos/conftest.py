"""The chaos suite's table: every scenario's counts, printed at the end of the session.

Each scenario appends a `harness.Row` to its worker's table (kept in the pytest
config's stash), whether its counts held or not. Under pytest-xdist each worker
sends its rows to the controller when it finishes (tests/chaos/gather.py), which
prints the one table of the whole run, and writes it as Markdown to the file
that ``$STREAMFLOW_CHAOS_TABLE`` names, if it names one.
"""

from __future__ import annotations

import pytest

from tests.chaos import gather, harness


@pytest.fixture
def chaos_table(request: pytest.FixtureRequest) -> list[harness.Row]:
    """The session's rows; a scenario appends its own."""
    return gather.rows(request.config)
