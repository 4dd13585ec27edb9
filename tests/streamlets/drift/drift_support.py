"""Shared helpers for the drift tests: bound detectors, synthetic streams, settling a harness."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from streamflow import Inlet, params
from streamflow.api.ports import Emit
from streamflow.api.streamlet import Record
from streamflow.streamlets.drift import DriftDetector
from streamflow.testkit import StreamletHarness

SCHEMAS = Path(__file__).parent / "schemas"
POINT = "tests.drift.Point"
PREDICTION = "tests.drift.Prediction"
LABEL = "tests.drift.Label"
COLORS = ("red", "green", "blue")


class InputDrift(DriftDetector):
    inp = Inlet("in", POINT)


class OutputDrift(DriftDetector):
    outputs = Inlet("outputs", PREDICTION)
    labels = Inlet("labels", LABEL)


class FullDrift(DriftDetector):
    inp = Inlet("in", POINT)
    outputs = Inlet("outputs", PREDICTION)


class HeldDrift(FullDrift):
    """A detector held back on purpose: it reads no data until it has seen model ``hold_until``,
    so it reads the records of every older model after it learnt of the newer one."""

    hold_until = params.Int(default=0, min=0, description="the model version to wait for")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.seen_version = 0

    def on_control(self, inlet: str, record: Record) -> Emit | None:
        if inlet == "model":
            self.seen_version = max(self.seen_version, int(record.value["version"]))
        return super().on_control(inlet, record)

    def accepts_data(self) -> bool:
        return super().accepts_data() and self.seen_version >= self.hold_until


def points(
    n: int,
    *,
    seed: int,
    start: int = 0,
    shift: float = 0.0,
    scale: float = 1.0,
    shift_at: int | None = None,
    colors: tuple[float, ...] = (0.5, 0.3, 0.2),
) -> list[dict[str, Any]]:
    """Points with x, y ~ N(0, 1) and a colour mix; from index ``shift_at`` on, x is
    ``shift + scale * N(0, 1)``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = rng.normal(size=n)
    picked = rng.choice(len(COLORS), size=n, p=np.array(colors) / sum(colors))
    out = []
    for i in range(n):
        index = start + i
        value = float(x[i])
        if shift_at is not None and index >= shift_at:
            value = shift + scale * value
        out.append({"id": f"p{index}", "x": value, "y": float(y[i]), "color": COLORS[picked[i]]})
    return out


def kafka_topics(*, predictions: bool) -> dict[str, dict[str, Any]]:
    """The topics of a detector named ``drift`` on the real broker (``support.make_app``)."""
    topics: dict[str, dict[str, Any]] = {"points": {"consumers": ["drift.in"]}}
    if predictions:
        topics["predictions"] = {"consumers": ["drift.outputs"]}
    return topics | {
        "models": {"consumers": ["drift.model"], "config": {"cleanup.policy": "compact"}},
        "drift-config": {"consumers": ["drift.control"]},
        "reports": {"producers": ["drift.reports"]},
        "alerts": {"producers": ["drift.alerts"]},
        "status": {"producers": ["drift.status"]},
    }


def harness(cls: type[DriftDetector], **config: Any) -> StreamletHarness:
    defaults: dict[str, Any] = {"window": 200, "reference_size": 1000}
    if cls is not OutputDrift:
        defaults |= {"numeric": ["x", "y"], "categorical": ["color"]}
    h = StreamletHarness(cls, config={**defaults, **config}, schema_paths=[SCHEMAS], name="drift")
    h.setup()
    return h


def settle(h: StreamletHarness, *, timeout: float = 30.0) -> dict[str, Any]:
    """Run between-batches until the pending config is decided; its status record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for out in h.between_batches():
            if out.outlet == "status" and out.value["state"] in ("serving", "failed"):
                return out.value
        time.sleep(0.01)
    raise AssertionError(f"the drift config was not decided in {timeout:.0f}s")


def reports(h: StreamletHarness, source: str = "inputs") -> list[dict[str, Any]]:
    return [v for v in h.values("reports") if v["source"] == source]
