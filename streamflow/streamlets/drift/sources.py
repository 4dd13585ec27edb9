"""What a drift detector watches: the model's inputs and its outputs, each a source of rows.

Each source turns records into columns (:class:`~.windows.Rows`), takes a
reference (a dataset, or its first N rows), and cuts windows. Inputs are
watched on the configured features; outputs on two derived ones, the top
probability (``confidence``, numeric) and the predicted class (categorical).

``take`` is pure: it returns the source's next state and the windows the
rows complete, and the streamlet commits that state only once the windows
are evaluated, so a batch that is retried (a hosted detector was down) is
not counted twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from streamflow.api.streamlet import Record
from streamflow.streamlets.drift import detect, windows
from streamflow.streamlets.drift.settings import DriftSettings

__all__ = ["OutputFields", "Source", "input_rows", "model_of", "output_rows"]

CONFIDENCE = "confidence"


@dataclasses.dataclass(frozen=True)
class OutputFields:
    probabilities: str
    predicted: str
    label: str


@dataclasses.dataclass(frozen=True)
class Source:
    """One watched stream: its features, reference (or the rows toward one), and windows."""

    name: str  # "inputs" or "outputs"
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    state: windows.WindowState
    reference: detect.Reference | None = None
    collect: int = 0  # rows still to collect as the reference; 0 when not collecting
    collected: windows.Rows | None = None
    problem: str = ""  # why there is no reference, when there is none

    @classmethod
    def start(
        cls,
        name: str,
        settings: DriftSettings,
        *,
        numeric: Sequence[str],
        categorical: Sequence[str],
        reference: detect.Reference | None = None,
        problem: str = "",
        hosted: bool = False,
    ) -> Source:
        """A fresh source; it collects a first-N reference unless it has (or needs) none."""
        state = windows.WindowState.start(
            size=settings.window,
            step=settings.step,
            numeric=len(numeric),
            categorical=len(categorical),
        )
        collect = 0 if reference is not None or problem or hosted else settings.reference_size
        return cls(
            name,
            tuple(numeric),
            tuple(categorical),
            state,
            reference,
            collect,
            windows.Rows.empty(len(numeric), len(categorical)) if collect else None,
            problem,
        )

    def take(
        self, rows: windows.Rows, settings: DriftSettings
    ) -> tuple[Source, int, list[windows.Window]]:
        """(next state, rows used for the reference, windows completed by the rest)."""
        used = 0
        source = self
        if self.collect and self.collected is not None:
            used = min(self.collect, len(rows))
            collected = self.collected.concat(rows.take(slice(0, used)))
            source = dataclasses.replace(self, collect=self.collect - used, collected=collected)
            if source.collect == 0:
                try:
                    reference = self._first_rows(collected, settings)
                except ValueError as exc:  # e.g. a feature that was never a number
                    source = dataclasses.replace(source, collected=None, problem=str(exc))
                else:
                    source = dataclasses.replace(source, reference=reference, collected=None)
            rows = rows.take(slice(used, None))
        state, completed = windows.advance(source.state, rows)
        return dataclasses.replace(source, state=state), used, completed

    def _first_rows(self, rows: windows.Rows, settings: DriftSettings) -> detect.Reference:
        columns: dict[str, Any] = {n: rows.numeric[:, i] for i, n in enumerate(self.numeric)}
        columns |= {n: rows.categorical[:, i].tolist() for i, n in enumerate(self.categorical)}
        return detect.prepare(
            columns,
            numeric=self.numeric,
            categorical=self.categorical,
            bins=settings.psi_bins,
            origin=f"the first {len(rows)} {self.name} records",
        )


def input_rows(records: Sequence[Record], source: Source) -> windows.Rows:
    """The input records' watched features as columns."""
    numeric = windows.stack(
        [[_number(r.value.get(f)) for f in source.numeric] for r in records], len(source.numeric)
    )
    categorical = np.array(
        [[str(r.value.get(f)) for f in source.categorical] for r in records], dtype=object
    ).reshape(len(records), len(source.categorical))
    return _rows(records, numeric, categorical, np.zeros(len(records), dtype=np.int64))


def output_rows(
    records: Sequence[Record], fields: OutputFields
) -> tuple[windows.Rows, list[int | None]]:
    """(confidence and class as columns, with model versions; the predicted classes)."""
    confidence: list[list[float]] = []
    classes: list[int | None] = []
    versions: list[int] = []
    for record in records:
        probabilities = record.value.get(fields.probabilities)
        predicted = record.value.get(fields.predicted)
        if predicted is None and probabilities:
            predicted = int(np.argmax(probabilities))
        confidence.append([max(probabilities) if probabilities else float("nan")])
        classes.append(None if predicted is None else int(predicted))
        versions.append(model_of(record)[1])
    categorical = np.array([[str(c)] for c in classes], dtype=object).reshape(len(records), 1)
    rows = _rows(
        records, windows.stack(confidence, 1), categorical, np.array(versions, dtype=np.int64)
    )
    return rows, classes


def model_of(record: Record) -> tuple[str, int]:
    """The model that produced an output: its ``streamflow-model`` header, else its fields."""
    header = record.headers.get("streamflow-model")
    if header:
        name, _, version = header.decode("utf-8", "replace").rpartition(":")
        if version.isdigit():
            return name, int(version)
    value: Mapping[str, Any] = record.value
    version_field = value.get("model_version")
    return str(value.get("model") or ""), int(version_field) if version_field else 0


def _rows(
    records: Sequence[Record], numeric: np.ndarray, categorical: np.ndarray, version: np.ndarray
) -> windows.Rows:
    return windows.Rows(
        numeric,
        categorical,
        np.array([r.topic for r in records], dtype=object),
        np.array([r.partition for r in records], dtype=np.int64),
        np.array([r.offset for r in records], dtype=np.int64),
        np.array([r.timestamp_ms for r in records], dtype=np.int64),
        version,
    )


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
