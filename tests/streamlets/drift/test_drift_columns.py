"""The detector reads the model's inputs as columns (``column_inlets``), to the same answer.

A detector that binds ``in`` has its windows filled from the batch's columns:
numbers and tensors straight from numpy arrays, with no pass over the records.
Each test runs the same stream through it and through the same detector read
record by record (``column_inlets = ()``), and asserts the reports, the counts of
unreadable records and the verdicts are the same, window for window.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_digits

from streamflow import Inlet
from streamflow.api.descriptor import describe
from streamflow.streamlets.drift import DriftDetector
from streamflow.streamlets.drift import inputs as drift_inputs
from streamflow.testkit import StreamletHarness
from tests.streamlets.drift import drift_support as d

DIGITS = load_digits().images
PIXELS = {"image": {"field": "pixels", "dtype": "float32", "shape": [64]}}
RAW = {"image": {"field": "raw", "dtype": "float32", "shape": [8, 8, 1]}}


class ImageDrift(DriftDetector):
    inp = Inlet("in", "tests.drift.Image")


class ImageDriftByRecord(ImageDrift):
    column_inlets = ()


class PointDriftByRecord(d.InputDrift):
    column_inlets = ()


def _images(n: int, *, seed: int, shifted: bool = False) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    images = DIGITS[rng.integers(len(DIGITS), size=n)].astype(np.float32)
    if shifted:
        images = np.roll(images, 1, axis=2)
    return [
        {
            "id": f"i{seed}-{i}",
            "pixels": image.reshape(64).tolist(),
            "raw": image.astype("<f4").reshape(8, 8, 1).tobytes(),
        }
        for i, image in enumerate(images)
    ]


def _reports(h: StreamletHarness) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "time"} for r in d.reports(h)]  # the clock


def test_detectors_that_bind_in_read_it_as_columns() -> None:
    assert describe(ImageDrift).column_inlets == ("in",)
    assert describe(d.InputDrift).column_inlets == ("in",)
    assert describe(d.OutputDrift).column_inlets == ()  # no `in` to read
    assert describe(ImageDriftByRecord).column_inlets == ()


@pytest.mark.parametrize("mapping", [PIXELS, RAW], ids=["array-64", "bytes-8x8x1"])
def test_images_give_the_same_reports_from_columns(
    mapping: dict[str, Any], tensors_from_columns: list[bool]
) -> None:
    good = _images(300, seed=3) + _images(200, seed=4, shifted=True)
    # records the mapping cannot read, in the first batches only: a short array breaks
    # the columns' one shape, and those batches' tensors are read record by record
    stream = [
        {**g, "pixels": g["pixels"][:10], "raw": g["raw"][:12]} if i % 37 == 5 and i < 150 else g
        for i, g in enumerate(good)
    ]
    seen = []
    for cls in (ImageDrift, ImageDriftByRecord):
        settings = {"inputs": mapping, "window": 100, "reference_size": 100}
        h = StreamletHarness(cls, config=settings, schema_paths=[d.SCHEMAS], name="drift")
        h.setup()
        d.settle(h)
        h.feed("in", stream)
        h.run()
        seen.append((_reports(h), h.context.skipped.get("drift-unreadable-input")))
    (columns, unreadable), (records, by_record) = seen
    assert columns == records and unreadable == by_record == 4
    # both ways were taken, by the detector that reads columns
    assert True in tensors_from_columns and False in tensors_from_columns
    assert [r["drifted"] for r in columns][-2:] == [True, True]  # the shifted digits


def test_numbers_and_categories_give_the_same_reports_from_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = d.points(2000, seed=11, shift=1.5, shift_at=1500)
    from_columns: list[int] = []
    read_columns = drift_inputs.read_columns

    def spied(batch: Any, shape: Any) -> Any:
        from_columns.append(batch.n)
        return read_columns(batch, shape)

    monkeypatch.setattr(drift_inputs, "read_columns", spied)
    seen = []
    for cls in (d.InputDrift, PointDriftByRecord):
        h = d.harness(cls, window=250, reference_size=500)
        d.settle(h)
        h.feed("in", stream)
        h.run()
        seen.append(_reports(h))
    assert seen[0] == seen[1]
    assert [r["drifted"] for r in seen[0]] == [False, False, False, False, True, True]
    assert sum(from_columns) == len(stream)  # every input was read from its columns
