"""One window's verdict: per-feature tests, the correction across them, severity, and remote mode.

Local mode tests every watched feature of the window against the prepared
reference (:mod:`.stats`): scalars one by one, a tensor input element by element
and as a whole (:mod:`.mmd`), a text input by length, vocabulary and new
words (:mod:`.text`). Remote mode sends the window's numeric matrix to a
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

from streamflow.models.remote import PermanentError
from streamflow.streamlets.datasets import Columns
from streamflow.streamlets.drift import inputs, mmd, stats, text, windows
from streamflow.streamlets.drift.settings import DriftSettings

__all__ = [
    "Reference",
    "TensorReference",
    "evaluate",
    "parse_detector",
    "prepare",
    "remote_features",
    "verdict",
    "window_report",
]


@dataclasses.dataclass(frozen=True)
class TensorReference:
    columns: slice  # the tensor's element columns in a window's numeric matrix
    elements: dict[str, stats.NumericReference]
    vectors: np.ndarray  # (rows, elements): the reference's whole tensors, flattened


@dataclasses.dataclass(frozen=True)
class Reference:
    numeric: dict[str, stats.NumericReference]  # the scalar features
    categorical: dict[str, stats.CategoricalReference]
    origin: str  # where it came from, for status messages
    tensors: dict[str, TensorReference] = dataclasses.field(default_factory=dict)
    texts: dict[str, text.TextReference] = dataclasses.field(default_factory=dict)


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


def prepare_rows(
    rows: windows.Rows, layout: inputs.Layout, *, settings: DriftSettings, origin: str
) -> Reference:
    """A reference from a stream's first rows: every feature and mapped input of ``layout``."""
    columns: dict[str, Any] = {n: rows.numeric[:, i] for i, n in enumerate(layout.scalars)}
    columns |= {n: rows.categorical[:, i].tolist() for i, n in enumerate(layout.categorical)}
    reference = prepare(
        columns,
        numeric=layout.scalars,
        categorical=layout.categorical,
        bins=settings.psi_bins,
        origin=origin,
    )
    for tensor in layout.tensors:
        block = rows.numeric[:, tensor.columns]
        vectors = block[np.isfinite(block).all(axis=1)]
        if not len(vectors):
            raise ValueError(f"reference input {tensor.name!r}: no record could be read")
        elements = {
            name: stats.NumericReference(vectors[:, i], bins=settings.psi_bins)
            for i, name in enumerate(tensor.elements)
        }
        reference.tensors[tensor.name] = TensorReference(tensor.columns, elements, vectors)
    for column, name in enumerate(layout.texts):
        reference.texts[name] = text.TextReference(
            rows.text[:, column].tolist(), top=settings.vocabulary
        )
    return reference


def evaluate(
    reference: Reference, rows: windows.Rows, *, settings: DriftSettings, seed: int = 0
) -> list[dict[str, Any]]:
    """FeatureDrift entries for one window (columns in the reference's feature order)."""
    entries: list[dict[str, Any]] = []
    numeric, categorical = rows.numeric, rows.categorical
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
    for name, tensor in reference.tensors.items():
        entries += _tensor(name, tensor, numeric[:, tensor.columns], settings, seed)
    for column, (name, tref) in enumerate(reference.texts.items()):
        entries += _text(name, tref, rows.text[:, column].tolist(), settings)
    return corrected(entries, settings)


def _tensor(
    name: str, ref: TensorReference, block: np.ndarray, settings: DriftSettings, seed: int
) -> list[dict[str, Any]]:
    """KS per element, and one MMD over the whole vectors; they share one share of alpha."""
    entries = []
    if "ks" in settings.tests:
        for column, (element, eref) in enumerate(ref.elements.items()):
            result = stats.ks_test(eref, block[:, column])
            entries.append(
                _entry(element, "TENSOR", "KS", result.statistic, result.p_value, group=name)
            )
    if "mmd" in settings.tests:
        multivariate = mmd.mmd_test(
            ref.vectors,
            block,
            permutations=settings.permutations,
            max_rows=settings.mmd_rows,
            seed=(seed, len(block)),
        )
        entries.append(
            _entry(name, "TENSOR", "MMD", multivariate.statistic, multivariate.p_value, part="mmd")
        )
    return entries


def _text(
    name: str, ref: text.TextReference, records: list[tuple[str, ...]], settings: DriftSettings
) -> list[dict[str, Any]]:
    """Length (KS on tokens per record), vocabulary share (chi-squared) and new words (OOV)."""
    entries = []
    if "ks" in settings.tests:
        result = stats.ks_test(ref.lengths, text.lengths(records))
        entries.append(_entry(name, "TEXT", "KS", result.statistic, result.p_value, part="length"))
    if "chi2" in settings.tests:
        result = text.vocabulary_test(ref, records)
        entries.append(_entry(name, "TEXT", "CHI2", result.statistic, result.p_value))
    if "oov" in settings.tests:
        rate = text.oov_rate(ref, records)
        entry = _entry(name, "TEXT", "OOV", rate, None, drifted=rate > settings.oov_threshold)
        entry["threshold"] = settings.oov_threshold
        entries.append(entry)
    return entries


def corrected(entries: list[dict[str, Any]], settings: DriftSettings) -> list[dict[str, Any]]:
    """Adjust the entries' p-values together and mark the significant ones drifted.

    Each feature or input has one equal share of alpha, split between its kinds
    of test and then between the tests of a kind (a tensor's elements).
    """
    tested = [e for e in entries if e["p_value"] is not None]
    weights = _weights(tested)
    adjusted = stats.adjust(
        [e["p_value"] for e in tested], method=settings.correction, weights=weights
    )
    for entry in entries:
        entry.pop("_share", None)
    for entry, p in zip(tested, adjusted, strict=True):
        entry["adjusted_p_value"] = p
        entry["threshold"] = settings.alpha
        entry["drifted"] = p <= settings.alpha
    return entries


def _weights(tested: list[dict[str, Any]]) -> list[float]:
    """Each test's share of alpha: one per group, split by part, then by test."""
    shares = [e.get("_share") or (e["feature"], e["test"]) for e in tested]
    parts: dict[str, set[str]] = {}
    for group, part in shares:
        parts.setdefault(group, set()).add(part)
    sizes = {share: shares.count(share) for share in set(shares)}
    return [1.0 / len(parts[group]) / sizes[(group, part)] for group, part in shares]


def _group(entry: dict[str, Any]) -> str:
    """The input an entry is about: a tensor's elements all belong to the tensor."""
    feature = str(entry["feature"])
    return feature.split("[", 1)[0] if entry.get("kind") == "TENSOR" else feature


def verdict(
    features: list[dict[str, Any]], signals: list[dict[str, Any]], settings: DriftSettings
) -> tuple[bool, str, str]:
    """(drifted, severity, message) for a window's features and signals."""
    moved = sorted({_group(e) for e in features if e["drifted"]})
    watched = {_group(e) for e in features}
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
        "model_version_from": _version_from(rows.origin),
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
    group: str = "",
    part: str = "",
) -> dict[str, Any]:
    """A FeatureDrift; ``group`` and ``part`` say which share of alpha its test takes."""
    entry: dict[str, Any] = {
        "feature": feature,
        "kind": kind,
        "test": test,
        "statistic": statistic,
        "p_value": p_value,
        "adjusted_p_value": None,
        "threshold": 0.0,
        "drifted": drifted,
    }
    if group or part:  # taken out by ``corrected``: a report has no such field
        entry["_share"] = (group or feature, part or test)
    return entry


def _psi(name: str, kind: str, value: float, settings: DriftSettings) -> dict[str, Any]:
    entry = _entry(name, kind, "PSI", value, None, drifted=value >= settings.psi_threshold)
    entry["threshold"] = settings.psi_threshold
    return entry


def _version_from(origin: np.ndarray) -> str:
    """Where a window's model version came from: its predictions, the newest descriptor, both."""
    found = set(np.unique(origin).tolist())
    named = {windows.PREDICTION: "predictions", windows.DESCRIPTOR: "descriptor"}
    return "+".join(name for code, name in named.items() if code in found)


def _time(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000.0, dt.UTC)
