"""The drift verdict as metrics, for alerts and dashboards.

A DriftReport record says everything about a window, but an alert rule
cannot read a topic. So each window's verdict is also a gauge,
``streamflow_drift_detected`` (1 while the newest window of that source
drifted, 0 once one does not), and a count of windows by verdict,
``streamflow_drift_windows_total``, whose rate says how often drift is seen.
Both carry the detector's name (several may share a topic), the source
(``inputs`` or ``outputs``) and the input partition, since windows are per
partition: the alert rule and the dashboard take the maximum over partitions.
"""

from __future__ import annotations

from streamflow.api.streamlet import Context

__all__ = ["export"]


def export(context: Context, *, detector: str, source: str, partition: int, drifted: bool) -> None:
    labels = {"detector": detector, "source": source, "partition": str(partition)}
    context.set_gauge(
        "drift_detected",
        1.0 if drifted else 0.0,
        description="1 while the newest window of this source and partition drifted, else 0.",
        labels=labels,
    )
    context.count(
        "drift_windows",
        description="Windows evaluated, by verdict.",
        labels={**labels, "drifted": "true" if drifted else "false"},
    )
