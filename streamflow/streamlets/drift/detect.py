"""One window's verdict: per-feature tests, the correction across them, severity, and remote mode.

Local mode tests every watched feature of the window against the prepared
reference (:mod:`.stats`). Remote mode sends the window's numeric matrix to a
detector hosted on a model server (Open Inference Protocol V2 ``infer``, the
way Seldon hosts detectors as models) and reads its answer in the shape
alibi-detect's servers give: outputs named ``p_val``, ``distance``,
``is_drift`` and ``threshold``, per feature or for the whole window.

The verdict is "drifted" when any test is significant after the correction,
any PSI reaches its threshold, or a streaming signal detector fired. Severity
grades it by how much of the input moved: HIGH when half of the features
drifted or a PSI is twice its threshold, MEDIUM at a quarter or one PSI past
its threshold, LOW otherwise (one feature, or only a signal).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamflow.streamlets.datasets import Columns
from streamflow.streamlets.drift import stats, windows
from streamflow.streamlets.drift.settings import DriftSettings
from streamflow.streamlets.serving.remote import PermanentError

__all__ = [
    "Reference",
    "evaluate",
    "parse_detector",
    "prepare",
    "remote_features",
    "verdict",
    "window_report",
]


@dataclasses.dataclass(frozen=True)
class Reference:
    numeric: dict[str, stats.NumericReference]
    categorical: dict[str, stats.CategoricalReference]
    origin: str  # where it came from, for status messages


def prepare(
    columns: Columns,
    *,
    numeric: Sequence[str],
    categorical: Sequence[str],
    bins: int,
    origin: str,
) -> Reference:
    """A reference ready for testing; ValueError names a feature it cannot use."""
    prepared_numeric = {}
    for name in numeric:
        try:
            prepared_numeric[name] = stats.NumericReference(columns[name], bins=bins)
        except ValueError as exc:
            raise ValueError(f"reference feature {name!r}: {exc}") from None
    prepared_categorical = {}
    for name in categorical:
        try:
            prepared_categorical[name] = stats.CategoricalReference(columns[name])
        except ValueError as exc:
            raise ValueError(f"reference feature {name!r}: {exc}") from None
    return Reference(prepared_numeric, prepared_categorical, origin)


def evaluate(
    reference: Reference,
    *,
    numeric: np.ndarray,
    categorical: np.ndarray,
    settings: DriftSettings,
) -> list[dict[str, Any]]:
    """FeatureDrift entries for one window (columns in the reference's feature order)."""
    entries: list[dict[str, Any]] = []
    for column, (name, ref) in enumerate(reference.numeric.items()):
        values = numeric[:, column]
        if "ks" in settings.tests:
            result = stats.ks_test(ref, values)
            entries.append(_entry(name, "NUMERIC", "KS", result.statistic, result.p_value))
        if "psi" in settings.tests:
            entries.append(_psi(name, "NUMERIC", stats.psi_numeric(ref, values), settings))
    for column, (name, cref) in enumerate(reference.categorical.items()):
        labels = categorical[:, column].tolist()
        if "chi2" in settings.tests:
            result = stats.chi2_test(cref, labels)
            entries.append(_entry(name, "CATEGORICAL", "CHI2", result.statistic, result.p_value))
        if "psi" in settings.tests:
            entries.append(_psi(name, "CATEGORICAL", stats.psi_categorical(cref, labels), settings))
    return corrected(entries, settings)


def corrected(entries: list[dict[str, Any]], settings: DriftSettings) -> list[dict[str, Any]]:
    """Adjust the entries' p-values together and mark the significant ones drifted."""
    tested = [e for e in entries if e["p_value"] is not None]
    adjusted = stats.adjust([e["p_value"] for e in tested], method=settings.correction)
    for entry, p in zip(tested, adjusted, strict=True):
        entry["adjusted_p_value"] = p
        entry["threshold"] = settings.alpha
        entry["drifted"] = p <= settings.alpha
    return entries


def verdict(
    features: list[dict[str, Any]], signals: list[dict[str, Any]], settings: DriftSettings
) -> tuple[bool, str, str]:
    """(drifted, severity, message) for a window's features and signals."""
    moved = sorted({e["feature"] for e in features if e["drifted"]})
    watched = {e["feature"] for e in features}
    fired = sorted({f"{s['signal']} ({s['detector']})" for s in signals if s["drifted"]})
    if not moved and not fired:
        return False, "NONE", f"no drift in {len(watched)} features"
    psi = max((e["statistic"] for e in features if e["test"] == "PSI"), default=0.0)
    share = len(moved) / len(watched) if watched else 0.0
    if share >= 0.5 or psi >= 2 * settings.psi_threshold:
        severity = "HIGH"
    elif share >= 0.25 or psi >= settings.psi_threshold:
        severity = "MEDIUM"
    else:
        severity = "LOW"
    parts = []
    if moved:
        parts.append(f"{len(moved)} of {len(watched)} features drifted: {', '.join(moved[:8])}")
    if fired:
        parts.append(f"signals changed: {', '.join(fired)}")
    return True, severity, "; ".join(parts)


def window_report(
    *,
    source: str,
    window: windows.Window,
    features: list[dict[str, Any]] | str,
    signals: list[dict[str, Any]],
    settings: DriftSettings,
    model: tuple[str, int],
    replica: str,
) -> dict[str, Any]:
    """The DriftReport of one window; ``features`` is a string when the window was not tested."""
    entries = features if isinstance(features, list) else []
    drifted, severity, message = verdict(entries, signals, settings)
    if isinstance(features, str):
        message = f"{features}; {message}" if signals else features
    rows = window.rows
    return {
        "detector": settings.name,
        "source": source,
        "model": model[0],
        "model_version": model[1],
        "config_version": settings.version,
        "window": {
            "index": window.index,
            "records": len(rows),
            "start_time": _time(int(rows.timestamp.min())),
            "end_time": _time(int(rows.timestamp.max())),
            "offsets": windows.offset_ranges(rows),
        },
        "features": entries,
        "signals": signals,
        "drifted": drifted,
        "severity": severity,
        "message": message,
        "replica": replica,
        "time": dt.datetime.now(dt.UTC),
    }


def parse_detector(body: Any, rows: int) -> dict[str, np.ndarray]:
    """A V2 infer response's outputs by name (the hosted detector's verdict)."""
    try:
        return {
            str(o["name"]): np.asarray(o["data"], dtype=np.float64).reshape(-1)
            for o in body["outputs"]
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise PermanentError(f"the detector's answer is not a V2 infer response: {exc}") from None


def remote_features(
    outputs: dict[str, np.ndarray], *, names: Sequence[str], settings: DriftSettings
) -> list[dict[str, Any]]:
    """FeatureDrift entries from a hosted detector's outputs."""
    if "p_val" not in outputs and "is_drift" not in outputs:
        raise PermanentError(
            f"the detector answered {sorted(outputs)}; expected p_val and/or is_drift outputs"
        )
    p_values = outputs.get("p_val", np.zeros(0))
    distance = outputs.get("distance", np.full(max(len(p_values), 1), np.nan))
    per_feature = len(p_values) == len(names) and len(names) > 1
    labels = list(names) if per_feature else ["*"]
    entries = []
    for index, label in enumerate(labels):
        p = float(p_values[index]) if len(p_values) > index else None
        statistic = float(distance[index]) if len(distance) > index else float("nan")
        entries.append(_entry(label, "NUMERIC", "REMOTE", statistic, p))
    entries = corrected(entries, settings)
    if "is_drift" in outputs and outputs["is_drift"].size:
        says = bool(outputs["is_drift"].reshape(-1)[0] >= 0.5)
        if not per_feature:
            entries[0]["drifted"] = says
        elif says and not any(e["drifted"] for e in entries):
            entries.append(_entry("*", "NUMERIC", "REMOTE", float("nan"), None, drifted=True))
    return entries


def _entry(
    feature: str,
    kind: str,
    test: str,
    statistic: float,
    p_value: float | None,
    *,
    drifted: bool = False,
) -> dict[str, Any]:
    return {
        "feature": feature,
        "kind": kind,
        "test": test,
        "statistic": statistic,
        "p_value": p_value,
        "adjusted_p_value": None,
        "threshold": 0.0,
        "drifted": drifted,
    }


def _psi(name: str, kind: str, value: float, settings: DriftSettings) -> dict[str, Any]:
    entry = _entry(name, kind, "PSI", value, None, drifted=value >= settings.psi_threshold)
    entry["threshold"] = settings.psi_threshold
    return entry


def _time(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000.0, dt.UTC)
