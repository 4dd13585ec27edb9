"""One batch through the detector's sources: columns, reference, versions, windows.

This is the pure half of ``DriftDetector.process_batch``: from the batch and
the state it started from, the state it ends with and the windows to report,
each with the batch position whose output carries its report. The streamlet
evaluates those windows (perhaps on a hosted detector that is down, which
retries the whole batch) and commits the state only then.

The batch is walked in record order, because that order is what makes an
input row's version deterministic: an output names the version of the input
with its key that is waiting, or waits for it (:class:`.versions.VersionJoin`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from streamflow.api.streamlet import Record
from streamflow.streamlets.drift import sources, versions, windows
from streamflow.streamlets.drift.settings import DriftSettings

__all__ = ["INPUTS", "LABELS", "OUTPUTS", "Planned", "plan"]

INPUTS, OUTPUTS, LABELS = "in", "outputs", "labels"


@dataclasses.dataclass(frozen=True)
class Planned:
    sources: dict[str, sources.Partitioned]  # the states after the batch
    join: versions.VersionJoin
    windows: list[tuple[str, windows.Window, int]]  # (role, window, batch position), in order
    classes: list[int | None]  # each output record's predicted class
    names: dict[int, str]  # model names by version, from the outputs
    refused: int  # input records the tensor mapping could not read


def plan(
    records: Sequence[Record],
    current: dict[str, sources.Partitioned],
    join: versions.VersionJoin,
    *,
    settings: DriftSettings,
    descriptor: tuple[str, int],
    fields: sources.OutputFields,
) -> Planned:
    """What this batch does to the sources; ``join`` is the caller's copy, changed in place."""
    positions: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        positions.setdefault(record.inlet, []).append(index)
    out_positions = positions.get(OUTPUTS, [])
    in_positions = positions.get(INPUTS, [])
    after = dict(current)
    planned: list[tuple[str, windows.Window, int]] = []
    classes: list[int | None] = []
    names: dict[int, str] = {}
    output_versions: dict[int, tuple[int, int]] = {}  # batch position -> (version, origin)
    if OUTPUTS in current:
        rows, classes = sources.output_rows([records[i] for i in out_positions], fields)
        rows = _fallback(rows, descriptor[1])
        for index, version, origin in zip(
            out_positions, rows.version.tolist(), rows.origin.tolist(), strict=True
        ):
            output_versions[index] = (version, origin)
            name = sources.model_of(records[index])[0]
            if name:
                names[version] = name
        after[OUTPUTS], completed = current[OUTPUTS].absorb(rows, settings)
        planned += [(OUTPUTS, w, out_positions[last]) for w, last in completed]
    refused = 0
    if INPUTS in current:
        rows, refused = sources.input_rows(
            [records[i] for i in in_positions], current[INPUTS].fresh
        )
        ready, at = _versioned(
            records,
            rows,
            in_positions,
            output_versions,
            join if OUTPUTS in current else None,
            descriptor,
        )
        # the reference is gathered after the join too, so that every input meets its
        # prediction (keys may repeat: a prediction left unmatched would label a later one)
        after[INPUTS], completed = current[INPUTS].absorb(ready, settings)
        planned += [(INPUTS, w, int(at[last])) for w, last in completed]
    planned.sort(key=lambda item: item[2])  # stable: a source's windows keep their order
    return Planned(after, join, planned, classes, names, refused)


def _versioned(
    records: Sequence[Record],
    rows: windows.Rows,
    positions: list[int],
    output_versions: dict[int, tuple[int, int]],
    join: versions.VersionJoin | None,
    descriptor: tuple[str, int],
) -> tuple[windows.Rows, np.ndarray]:
    """The input rows whose version is now known, each with it; where each became known.

    With an outputs inlet, an input takes the version of the prediction with its key,
    waiting for it when need be; without one, or without a key, the newest descriptor's.
    """
    released: list[tuple[tuple[windows.Rows, int], tuple[int, int], int]] = []
    fallback = (descriptor[1], windows.DESCRIPTOR if descriptor[1] else 0)
    inputs_at = {p: i for i, p in enumerate(positions)}
    for index, record in enumerate(records):
        key = record.key
        if index in output_versions:
            if join is not None and key is not None:
                waiting = join.prediction(key, output_versions[index])
                if waiting is not None:
                    released.append((waiting, output_versions[index], index))
        elif index in inputs_at:
            row = (rows, inputs_at[index])
            if join is None or key is None:
                released.append((row, fallback, index))
                continue
            known, evicted = join.input(key, row)
            released += [(e, fallback, index) for e in evicted]
            if known is not None:
                released.append((row, known, index))
    return _gather(released, rows)


def _fallback(rows: windows.Rows, version: int) -> windows.Rows:
    """Outputs that name no version take the newest descriptor's, and say so."""
    unknown = rows.version == 0
    if not version or not unknown.any():
        return rows
    return dataclasses.replace(
        rows,
        version=np.where(unknown, version, rows.version),
        origin=np.where(unknown, windows.DESCRIPTOR, rows.origin).astype(np.int8),
    )


def _gather(
    released: list[tuple[tuple[windows.Rows, int], tuple[int, int], int]], like: windows.Rows
) -> tuple[windows.Rows, np.ndarray]:
    """The released input rows, in release order, with their versions; where each was released."""
    if not released:
        return like.take(slice(0, 0)), np.zeros(0, dtype=np.int64)
    parts: list[windows.Rows] = []
    run: list[int] = []
    chunk = released[0][0][0]
    for (rows, index), _, _ in released:
        if rows is not chunk:
            parts.append(chunk.take(np.array(run, dtype=np.int64)))
            chunk, run = rows, []
        run.append(index)
    parts.append(chunk.take(np.array(run, dtype=np.int64)))
    ready = parts[0]
    for part in parts[1:]:
        ready = ready.concat(part)
    ready = dataclasses.replace(
        ready,
        version=np.array([v for _, (v, _), _ in released], dtype=np.int64),
        origin=np.array([o for _, (_, o), _ in released], dtype=np.int8),
    )
    return ready, np.array([p for _, _, p in released], dtype=np.int64)
