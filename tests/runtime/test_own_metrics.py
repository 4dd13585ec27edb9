"""A streamlet's own metrics: reported through its Context, exported by the replica's Metrics."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from prometheus_client import generate_latest

from streamflow.api.streamlet import Context
from streamflow.runtime.metrics import Metrics


def scrape(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_gauges_and_counts_are_exported_with_the_replicas_labels() -> None:
    context, metrics = Context(), Metrics(app="wine", streamlet="drift", replica=2)
    context.set_gauge("drift_detected", 1, description="Drifted.", labels={"source": "inputs"})
    context.count("drift_windows", description="Windows.", labels={"source": "inputs"})
    context.count("drift_windows", description="Windows.", count=2, labels={"source": "inputs"})
    metrics.export_own(context.metrics)
    text = scrape(metrics)
    labels = 'app="wine",replica="2",source="inputs",streamlet="drift"'
    assert f"streamflow_drift_detected{{{labels}}} 1.0" in text
    assert f"streamflow_drift_windows_total{{{labels}}} 3.0" in text
    assert "# HELP streamflow_drift_detected Drifted." in text
    # exported values are taken; a later count adds to the counter, a gauge is replaced
    context.count("drift_windows", description="Windows.", labels={"source": "inputs"})
    context.set_gauge("drift_detected", 0, description="Drifted.", labels={"source": "inputs"})
    metrics.export_own(context.metrics)
    metrics.export_own(context.metrics)  # nothing new: nothing counted twice
    text = scrape(metrics)
    assert f"streamflow_drift_windows_total{{{labels}}} 4.0" in text
    assert f"streamflow_drift_detected{{{labels}}} 0.0" in text


def test_without_a_runtime_the_values_wait_in_the_context() -> None:
    context = Context()
    context.set_gauge("model_loaded", 0, description="Loaded.")
    context.set_gauge("model_loaded", 1, description="Loaded.")
    context.count("reloads", description="Reloads.", count=2)
    context.count("reloads", description="Reloads.")
    reported = context.metrics
    assert reported["model_loaded"].values == {(): 1.0}
    assert reported["reloads"].values == {(): 3.0}


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda c: c.set_gauge("Model-Loaded", 1, description="x"), "lower-case letters"),
        (lambda c: c.count("reloads_total", description="x"), "_total added"),
        (lambda c: c.set_gauge("up", 1, description="x", labels={"app": "a"}), "runtime's"),
        (lambda c: c.set_gauge("up", 1, description="x", labels={"source": "a"}), "labels ['x']"),
        (lambda c: c.count("up", description="x", labels={"x": "a"}), "cannot become a counter"),
    ],
    ids=["name", "total", "reserved-label", "other-labels", "other-kind"],
)
def test_a_metric_prometheus_would_refuse_is_refused_where_it_is_reported(
    call: Callable[[Context], None], says: str
) -> None:
    context = Context()
    context.set_gauge("up", 1, description="x", labels={"x": "a"})
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        call(context)


def test_a_name_the_runtime_uses_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    context, metrics = Context(), Metrics(app="wine", streamlet="s", replica=0)
    context.count("records_in", description="Mine.")
    with caplog.at_level(logging.ERROR, logger="streamflow.runtime"):
        metrics.export_own(context.metrics)
        context.count("records_in", description="Mine.")
        metrics.export_own(context.metrics)
    assert len([r for r in caplog.records if "'records_in' is not exported" in r.message]) == 1
    assert "Mine." not in scrape(metrics)
