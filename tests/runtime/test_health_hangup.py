"""The health server when a probe hangs up before its answer is written."""

from __future__ import annotations

import io

from streamflow.runtime import health
from streamflow.runtime.metrics import Metrics


class _HungUp(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError(32, "Broken pipe")


def test_a_probe_that_hung_up_costs_no_traceback() -> None:
    """A liveness probe that timed out on a loaded machine closes its socket; writing the
    answer then raises BrokenPipeError, which must end the request quietly (CI saw the
    traceback in a replica's log during the rollout e2e)."""
    handler_class = health._handler(
        health.HealthState(), Metrics(app="a", streamlet="s", replica=0)
    )
    handler = handler_class.__new__(handler_class)
    handler.path = "/healthz"
    handler.request_version = "HTTP/1.1"
    handler.requestline = "GET /healthz HTTP/1.1"
    handler.command = "GET"
    handler.wfile = _HungUp()
    handler.close_connection = False
    handler.do_GET()  # raised BrokenPipeError before
    assert handler.close_connection is True
