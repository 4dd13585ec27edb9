"""What a drift detector watches: the model's inputs and its outputs, each a source of rows.

Each source turns records into columns (:class:`~.windows.Rows`), takes a
reference (a dataset, or its first N rows), and cuts windows per model version
(:mod:`.versions`). Inputs are watched on the configured features and mapped
inputs (:mod:`.inputs`); outputs on two derived ones, the top probability
(``confidence``, numeric) and the predicted class (categorical).

``gather`` and ``advance`` are pure: they return the source's next state (and
the windows the rows complete), and the streamlet commits that state only
once the windows are evaluated, so a batch that is retried (a hosted detector
was down) is not counted twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from streamflow.api.columns import columns_of
from streamflow.api.streamlet import Record
from streamflow.streamlets.drift import detect, inputs, versions, windows
from streamflow.streamlets.drift.settings import DriftSettings
from streamflow.streamlets.served_by import model_of

__all__ = [
    "CONFIDENCE",
    "OutputFields",
    "Partitioned",
    "Source",
    "input_rows",
    "model_of",
    "output_layout",
    "output_rows",
]

CONFIDENCE = "confidence"


@dataclasses.dataclass(frozen=True)
class OutputFields:
    probabilities: str
    predicted: str
    label: str


@dataclasses.dataclass(frozen=True)
class Source:
    """One watched stream: its columns, reference (or the rows toward one), and windows."""

    name: str  # "inputs" or "outputs"
    layout: inputs.Layout
    state: versions.VersionedWindows
    reference: detect.Reference | None = None
    collect: int = 0  # rows still to collect as the reference; 0 when not collecting
    # the first-N reference's rows, also once it is made (the durable state rebuilds it)
    collected: windows.Rows | None = None
    problem: str = ""  # why there is no reference, when there is none

    @property
    def numeric(self) -> tuple[str, ...]:
        return self.layout.numeric

    @classmethod
    def start(
        cls,
        name: str,
        settings: DriftSettings,
        *,
        layout: inputs.Layout,
        reference: detect.Reference | None = None,
        problem: str = "",
        hosted: bool = False,
    ) -> Source:
        """A fresh source; it collects a first-N reference unless it has (or needs) none."""
        state = versions.VersionedWindows(settings.window, settings.step, layout.widths)
        collect = 0 if reference is not None or problem or hosted else settings.reference_size
        return cls(
            name,
            layout,
            state,
            reference,
            collect,
            windows.Rows.empty(*layout.widths) if collect else None,
            problem,
        )

    def gather(self, rows: windows.Rows, settings: DriftSettings) -> tuple[Source, int]:
        """(next state, how many of ``rows`` it took for its first-N reference)."""
        if not self.collect or self.collected is None:
            return self, 0
        used = min(self.collect, len(rows))
        collected = self.collected.concat(rows.take(slice(0, used)))
        source = dataclasses.replace(self, collect=self.collect - used, collected=collected)
        if source.collect == 0:
            try:
                reference = detect.prepare_rows(
                    collected,
                    self.layout,
                    settings=settings,
                    origin=f"the first {len(collected)} {self.name} records",
                )
            except ValueError as exc:  # e.g. a feature that was never a number
                source = dataclasses.replace(source, problem=str(exc))
            else:
                source = dataclasses.replace(source, reference=reference)
        return source, used

    def advance(self, rows: windows.Rows) -> tuple[Source, list[windows.Window]]:
        """(next state, the windows these rows, each with its version, complete or close)."""
        state, completed = versions.advance(self.state, rows)
        return dataclasses.replace(self, state=state), completed

    def absorb(
        self, rows: windows.Rows, settings: DriftSettings
    ) -> tuple[Source, list[tuple[windows.Window, int]]]:
        """:meth:`gather`, then :meth:`advance` with the rest: the next state, and each
        window with the index (in ``rows``) of the row that completed it."""
        source, used = self.gather(rows, settings)
        source, completed = source.advance(rows.take(slice(used, None)))
        return source, [(w, used + w.last) for w in completed]


@dataclasses.dataclass(frozen=True)
class Partitioned:
    """One source's state per input partition: each partition has its own reference
    (when collected from its first N rows) and its own windows.

    Windows per partition are what survive a rebalance: a partition's rows, and so its
    windows, go wherever the partition goes (:mod:`.durable` keeps them in the
    partition's store). They also make a report independent of how partitions are
    spread over replicas. ``fresh`` is what a partition starts from.
    """

    fresh: Source
    parts: Mapping[int, Source] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.fresh.name

    def part(self, partition: int) -> Source:
        return self.parts.get(partition, self.fresh)

    def absorb(
        self, rows: windows.Rows, settings: DriftSettings
    ) -> tuple[Partitioned, list[tuple[windows.Window, int]]]:
        """Each partition's rows through its own source (rows keep their order within one)."""
        parts = dict(self.parts)
        completed: list[tuple[windows.Window, int]] = []
        for partition in dict.fromkeys(rows.partition.tolist()):
            where = np.flatnonzero(rows.partition == partition)
            parts[partition], done = self.part(partition).absorb(rows.take(where), settings)
            completed += [(window, int(where[last])) for window, last in done]
        completed.sort(key=lambda item: item[1])  # stable: a partition's windows keep their order
        return dataclasses.replace(self, parts=parts), completed

    @property
    def filled(self) -> int:
        """Rows toward a window, over every partition."""
        return sum(source.state.filled for source in self.parts.values())


def summary(watched: Iterable[Source], settings: DriftSettings, *, hosted: bool) -> str:
    """What the detector compares, for status messages."""
    parts = []
    for source in watched:
        ref = source.reference.origin if source.reference else source.problem
        if source.name == "inputs" and hosted:
            ref = f"the detector at {settings.detector_url}"
        parts.append(f"{source.name}: {ref or f'the first {source.collect} records'}")
    s = settings
    kind = "tumbling" if s.step == s.window else f"sliding by {s.step}"
    return f"{'; '.join(parts)}; {kind} windows of {s.window}, alpha {s.alpha} ({s.correction})"


def output_layout(class_field: str) -> inputs.Layout:
    """The columns of an output: its top probability and its predicted class."""
    return inputs.layout(numeric=[CONFIDENCE], categorical=[class_field])


def input_rows(records: Sequence[Record], source: Source) -> tuple[windows.Rows, int]:
    """(the input records' watched features as columns, how many the mapping refused):
    from the columns they were decoded into, where the runtime did (``column_inlets``)."""
    batch = columns_of(records)
    if batch is not None:
        numeric, categorical, text, refused = inputs.read_columns(batch, source.layout)
    else:
        values = [r.value for r in records]
        numeric, categorical, text, refused = inputs.read(values, source.layout)
    rows = _rows(records, numeric, categorical, np.zeros(len(records), dtype=np.int64), text)
    return rows, refused


def output_rows(
    records: Sequence[Record], fields: OutputFields
) -> tuple[windows.Rows, list[int | None]]:
    """(confidence and class as columns, with model versions; the predicted classes)."""
    confidence: list[list[float]] = []
    classes: list[int | None] = []
    found: list[int] = []
    for record in records:
        probabilities = record.value.get(fields.probabilities)
        predicted = record.value.get(fields.predicted)
        if predicted is None and probabilities:
            predicted = int(np.argmax(probabilities))
        confidence.append([max(probabilities) if probabilities else float("nan")])
        classes.append(None if predicted is None else int(predicted))
        found.append(model_of(record)[1])
    categorical = np.array([[str(c)] for c in classes], dtype=object).reshape(len(records), 1)
    rows = _rows(
        records,
        windows.stack(confidence, 1),
        categorical,
        np.array(found, dtype=np.int64),
        np.zeros((len(records), 0), dtype=object),
    )
    return rows, classes


def _rows(
    records: Sequence[Record],
    numeric: np.ndarray,
    categorical: np.ndarray,
    version: np.ndarray,
    text: np.ndarray,
) -> windows.Rows:
    return windows.Rows(
        numeric,
        categorical,
        np.array([r.topic for r in records], dtype=object),
        np.array([r.partition for r in records], dtype=np.int64),
        np.array([r.offset for r in records], dtype=np.int64),
        np.array([r.timestamp_ms for r in records], dtype=np.int64),
        version,
        np.where(version > 0, windows.PREDICTION, 0).astype(np.int8),
        text,
    )
