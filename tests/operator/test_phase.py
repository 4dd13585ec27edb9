"""``Phase`` is an enum in the code and the same strings on every wire.

Before it was an enum the phase was a plain string; the CLI's ``-o json`` and
``-o yaml``, the web view and the StreamflowApplication's status (and its CRD
enum) must read exactly as they did.
"""

from __future__ import annotations

import json

import pytest

from streamflow.cli import output
from streamflow.operator import targets
from streamflow.operator.targets import Phase


def _status(phase: Phase) -> targets.AppStatus:
    streamlet = targets.StreamletStatus(name="scale", desired=1, ready=1, running=1)
    return targets.AppStatus("shop", "local", phase, "", True, (streamlet,))


def test_a_phase_is_its_string() -> None:
    assert [str(p) for p in Phase] == ["Pending", "Running", "Degraded", "Failed"]
    assert Phase.RUNNING == "Running"
    assert json.dumps({"phase": Phase.FAILED}) == '{"phase": "Failed"}'


def test_status_data_carries_the_plain_string() -> None:
    data = _status(Phase.DEGRADED).to_dict()
    assert data["phase"] == "Degraded" and type(data["phase"]) is str
    assert json.loads(json.dumps(data))["phase"] == "Degraded"


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_cli_prints_the_phase_as_before(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    output.print_data(_status(Phase.RUNNING).to_dict(), fmt=fmt)
    printed = capsys.readouterr().out
    assert ('"phase": "Running"' if fmt == "json" else "phase: Running") in printed


def test_a_recorded_phase_this_version_does_not_know_reads_as_pending() -> None:
    assert Phase.recorded("Running") is Phase.RUNNING
    assert Phase.recorded("Exploded") is Phase.PENDING
    assert Phase.recorded(None) is Phase.PENDING


def test_the_crd_and_the_operator_write_plain_strings() -> None:
    pytest.importorskip("kubernetes")
    from streamflow.operator.kubernetes import crd, status

    schema = crd.status_schema()["properties"]["phase"]
    assert schema["enum"] == ["Pending", "Running", "Degraded", "Failed"]
    assert all(type(value) is str for value in schema["enum"])
    written = status.build(
        generation=1, desired={}, deployments={}, conditions=(), previous=None, now="t"
    )
    assert written["phase"] == "Running" and type(written["phase"]) is str
    failed = status.build(
        generation=1,
        desired={},
        deployments={},
        conditions=(),
        previous=None,
        now="t",
        failure="bad spec",
    )
    assert failed["phase"] == "Failed" and type(failed["phase"]) is str
    ready = next(c for c in failed["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "Failed" and type(ready["reason"]) is str
