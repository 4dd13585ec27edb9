"""A closed window judged: its features tested, here or by the hosted detector, then its
report, logged and exported to the metrics when its verdict changes.

The detector streamlet decides which windows close and in what order their reports
go out; this module is what happens to one window once it has.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from streamflow.api.streamlet import Context
from streamflow.models import remote
from streamflow.streamlets.drift import detect, metrics, sources, windows
from streamflow.streamlets.drift.settings import DriftSettings

__all__ = ["Judged", "features", "judge", "partition"]

log = logging.getLogger("streamflow.streamlets.drift")

#: A window's report, and whether it is an alert (its verdict differs from the last one).
Judged = tuple[dict[str, Any], bool]


def partition(window: windows.Window) -> int:
    """The partition a window's rows came from (a window holds one partition's rows)."""
    return int(window.rows.partition[0])


async def features(
    source: sources.Source,
    window: windows.Window,
    *,
    client: remote.InferenceClient | None,
    settings: DriftSettings,
) -> list[dict[str, Any]] | str:
    """The window's FeatureDrift entries, or why there are none. A hosted detector that
    is down raises ``Backpressure`` (the batch is retried); one that refuses is a reason."""
    if source.name == "inputs" and client is not None:
        try:
            outputs = await client.call(
                window.rows.numeric.astype(np.float32), parse=detect.parse_detector
            )
            return detect.remote_features(outputs, names=source.numeric, settings=settings)
        except remote.PermanentError as exc:
            log.warning("the hosted detector refused window %d: %s", window.index, exc)
            return f"the hosted detector failed: {exc}"
    if source.reference is None:
        return f"no reference: {source.problem or 'still collecting'}"
    return detect.evaluate(source.reference, window.rows, settings=settings, seed=window.index)


def judge(
    source: sources.Source,
    window: windows.Window,
    tested: list[dict[str, Any]] | str,
    signals: list[dict[str, Any]],
    *,
    was: bool,
    settings: DriftSettings,
    model: tuple[str, int],
    context: Context,
) -> Judged:
    """The window's report, and whether it alerts: its verdict differs from ``was``, the
    last one of its partition. The verdict is the report's ``drifted``."""
    report = detect.window_report(
        source=source.name,
        window=window,
        features=tested,
        signals=signals,
        settings=settings,
        model=model,
        replica=f"{context.streamlet}-{context.replica}",
    )
    alert = report["drifted"] != was
    if alert:
        log.log(
            logging.WARNING if report["drifted"] else logging.INFO,
            "%s %s[%d] drift: %s",
            settings.name,
            source.name,
            partition(window),
            report["message"],
        )
    metrics.export(
        context,
        detector=settings.name,
        source=source.name,
        partition=partition(window),
        drifted=report["drifted"],
    )
    return report, alert
