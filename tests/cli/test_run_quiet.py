"""`streamflow run` keeps TensorFlow's start-up lines out of the replicas' output unless `-v`.

TF_CPP_MIN_LOG_LEVEL no longer hides them (TensorFlow 2.21 logs through absl), so a
user's first screen of `./dev run` was absl's note and oneDNN's, once per replica and
model load. Errors in the same format are never hidden.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from streamflow.cli import run_cmds

START_UP = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796368810.828737   11622 port.cc:153] oneDNN custom operations are on. "
    "You may see slightly different numerical results",
]
OURS = "07:20:14 INFO    loaded wine:1, KERAS (keras:wine_v1), in 3.70s"
ERROR = "E0000 00:00:1796368810.828737   11622 port.cc:153] something went wrong"


def _print(capsys: pytest.CaptureFixture[str], *, quiet: bool) -> str:
    app = cast(Any, SimpleNamespace(streamlets={"classifier": None}))
    replica = cast(Any, SimpleNamespace(name="classifier-0", streamlet="classifier"))
    printer = run_cmds._printer(app, quiet=quiet)
    for line in [*START_UP, OURS, ERROR]:
        printer(replica, line)
    return capsys.readouterr().err


def test_tensorflows_start_up_lines_are_hidden_and_errors_are_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = _print(capsys, quiet=True)
    assert "absl::InitializeLog" not in shown and "oneDNN" not in shown
    assert "loaded wine:1" in shown and "something went wrong" in shown


def test_verbose_shows_them(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _print(capsys, quiet=False)
    assert "absl::InitializeLog" in shown and "oneDNN" in shown


def test_run_has_a_verbose_flag() -> None:
    from typer.testing import CliRunner

    from streamflow.cli.main import app

    result = CliRunner().invoke(app, ["run", "--help"])
    assert "--verbose" in result.output and "TensorFlow" in result.output
