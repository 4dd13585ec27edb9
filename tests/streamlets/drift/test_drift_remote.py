"""Remote mode: a drift detector hosted on KServe's ModelServer, called with each window."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

from streamflow import Backpressure, Record
from tests.streamlets.drift import drift_support as d
from tests.streamlets.drift.hosted import Hosted


def _records(rows: list[dict[str, object]]) -> list[Record]:
    return [Record(r, None, "in", "in", 0, i, 0) for i, r in enumerate(rows)]


def test_a_hosted_detector_judges_each_window_and_holds_the_batch_when_down(
    tmp_path: Path, hosted_models: Callable[..., AbstractContextManager[Hosted]]
) -> None:
    reference = np.random.default_rng(0).normal(size=(1000, 2))
    with hosted_models(tmp_path, reference=reference, weights=[0, 0], baseline=[0, 0]) as server:
        config = {
            "detector_url": server.url,
            "detector_model": "detector",
            "allowlist": ["http://127.0.0.1:"],
            "numeric": ["x", "y"],
            "categorical": [],
            "window": 250,
            "retries": 0,
        }
        h = d.harness(d.InputDrift, **config)
        status = d.settle(h)
        assert status["state"] == "serving", status["message"]
        h.feed("in", d.points(500, seed=1))
        h.feed("in", d.points(500, seed=2, start=500, shift=1.0, shift_at=0))
        h.run()
        reports = d.reports(h)
        # the first N records are not needed: the detector holds its own reference
        assert [r["drifted"] for r in reports] == [False, False, True, True]
        shifted = reports[2]["features"]
        assert [(f["feature"], f["test"]) for f in shifted] == [("x", "REMOTE"), ("y", "REMOTE")]
        assert shifted[0]["drifted"] and not shifted[1]["drifted"]
        assert shifted[0]["adjusted_p_value"] < 1e-6 and shifted[0]["statistic"] > 0.3
        server.stop()
        # a detector that is down when a config loads fails the config, clearly
        down = d.harness(d.InputDrift, **config)
        status = d.settle(down)
        assert status["state"] == "failed" and "is unreachable" in status["message"]
    # one that goes down mid-stream holds the batch (Backpressure: the runtime retries it)
    with hosted_models(tmp_path, reference=reference, weights=[0, 0], baseline=[0, 0]) as server:
        h = d.harness(d.InputDrift, **{**config, "detector_url": server.url})
        assert d.settle(h)["state"] == "serving"
        before = h.streamlet.sources["in"]
        server.stop()
        loop = asyncio.new_event_loop()
        with pytest.raises(Backpressure, match="model server failed"):
            loop.run_until_complete(h.streamlet.process_batch(_records(d.points(250, seed=3))))
        loop.close()
        assert h.streamlet.sources["in"] is before  # nothing committed: the retry starts afresh
