"""A command's module is imported when that command runs, and the table of commands is true.

`streamflow` maps each command to the module that registers it (`COMMANDS` in
streamflow/cli/main.py), so a replica's `streamlet run` or a `status` does not
import the deploy, build, score and model code. The table must say exactly what
each module registers, or a command would vanish from the CLI or from `--help`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from streamflow.cli.main import COMMANDS, app, commands_of

_MODULES_LOADED = """
import json, sys
from streamflow.cli.main import main
sys.argv = ["streamflow", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("streamflow.cli."))))
"""


def _cli_modules_after(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", _MODULES_LOADED, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    last = result.stdout.strip().splitlines()[-1]
    return {name.removeprefix("streamflow.cli.") for name in json.loads(last)}


@pytest.mark.parametrize("module", list(COMMANDS))
def test_each_module_registers_exactly_the_commands_the_table_names(module: str) -> None:
    assert tuple(commands_of(module)) == COMMANDS[module]


def test_a_replicas_command_imports_no_other_commands_module() -> None:
    loaded = _cli_modules_after("streamlet", "run", "--help")
    assert "streamlet_cmds" in loaded
    assert not loaded & {"deploy_cmds", "build_cmds", "score_cmds", "model_cmds", "run_cmds"}, (
        loaded
    )


def test_status_imports_only_the_deploy_commands() -> None:
    loaded = _cli_modules_after("status", "--help")
    assert "deploy_cmds" in loaded
    assert not loaded & {"build_cmds", "score_cmds", "model_cmds", "streamlet_cmds"}, loaded


def test_help_lists_every_command_and_a_typo_gets_a_suggestion() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    for names in COMMANDS.values():
        for name in names:
            assert f" {name} " in listed.output, (name, listed.output)
    typo = runner.invoke(app, ["stauts", "x"], env={"COLUMNS": "200"})
    assert typo.exit_code == 2
    assert "No such command 'stauts'. Did you mean 'status'?" in typo.output


_LIBRARIES_LOADED = """
import json, sys
import streamflow.cli.main, streamflow.cli.streamlet_cmds, streamflow.runtime.replica
from streamflow.streamlets.io import FileEgress, Generator
from streamflow.runtime.state import codec
codec.decode(codec.encode({"count": (1, 2.0)}))
print(json.dumps(sorted(m for m in ("numpy", "httpx", "uvicorn") if m in sys.modules)))
"""


def test_a_replica_that_needs_no_arrays_registry_or_http_server_imports_none() -> None:
    """Each is a tenth of a second of every replica's start (0.47 -> 0.27 CPU s for the
    imports of a generator, a processor or a file sink): imported where first used."""
    result = subprocess.run(
        [sys.executable, "-c", _LIBRARIES_LOADED],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
