"""Streamlets with ``process_columns``, run by the real processor in the harness.

The batch arrives as columns (numpy arrays), the outputs go back as columns, and
every failure stays one record's: a record that does not decode, a row the logic
fails, a row whose values do not fit the outlet, a row that raises alone. The
counts show that nothing is lost: every fed record is an output or a dead letter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from streamflow import Inlet, Outlet, Streamlet
from streamflow.api.columns import ColumnBatch, ColumnResult
from streamflow.api.descriptor import DeclarationError, describe
from streamflow.api.streamlet import Logic
from streamflow.schema.codecs import EncodeError
from streamflow.testkit import StreamletHarness

HarnessFactory = Callable[..., StreamletHarness]

SEEN: list[ColumnBatch] = []


class Tripler(Streamlet):
    inp = Inlet("in", "test.Reading")
    out = Outlet("out", "test.Score")

    def process_columns(self, batch: ColumnBatch) -> ColumnResult:
        SEEN.append(batch)
        values = batch["value"]
        errors: dict[int, BaseException] = {
            int(i): ValueError("negative reading") for i in np.flatnonzero(values < 0)
        }
        ids = batch["id"].copy()
        ids[values == 7] = None  # does not fit the outlet: `id` is a string
        return ColumnResult(
            {"id": ids, "score": values * 3.0}, errors=errors, headers={"scored-by": "tripler"}
        )


class Raiser(Streamlet):
    """Raises on any batch that holds a 13: alone, only that row fails."""

    inp = Inlet("in", "test.Reading")
    out = Outlet("out", "test.Score")

    async def process_columns(self, batch: ColumnBatch) -> dict[str, Any]:
        if (batch["value"] == 13).any():
            raise ValueError("unlucky reading")
        return {"id": batch["id"], "score": batch["value"]}


def _readings(*values: float) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "value": v} for i, v in enumerate(values)]


def test_the_logic_gets_columns_and_its_columns_are_written(harness: HarnessFactory) -> None:
    SEEN.clear()
    h = harness(Tripler)
    h.feed("in", _readings(1.0, 2.5, 4.0), keys=["a", None, "c"])
    h.run()
    assert describe(Tripler).logic is Logic.PROCESS_COLUMNS
    [batch] = SEEN
    assert isinstance(batch["value"], np.ndarray) and batch["value"].dtype == np.float64
    assert batch["value"].tolist() == [1.0, 2.5, 4.0] and batch.n == 3
    assert batch.records()[1] == {"id": "r1", "value": 2.5, "at": batch.records()[1]["at"]}
    assert h.outputs("out") == [
        ("a", {"id": "r0", "score": 3.0, "model": ""}),
        (None, {"id": "r1", "score": 7.5, "model": ""}),
        ("c", {"id": "r2", "score": 12.0, "model": ""}),
    ]
    assert all(o.headers.get("scored-by") == "tripler" for o in h.all_outputs)
    assert h.dead_letters == []


def test_each_failure_is_one_records_and_nothing_is_lost(harness: HarnessFactory) -> None:
    h = harness(Tripler)
    fed = _readings(1.0, -2.0, 5.0)
    h.feed("in", fed)
    h.feed("in", b"\xc3\x01 not a reading")
    h.feed("in", _readings(6.0))
    h.run()
    assert [v["score"] for v in h.values("out")] == [3.0, 15.0, 18.0]
    by_kind = sorted((d.kind, d.error.split(":")[0]) for d in h.dead_letters)
    assert by_kind == [("decode", "DecodeError"), ("logic", "ValueError")]
    logic = next(d for d in h.dead_letters if d.kind == "logic")
    assert logic.value is not None and logic.value["value"] == -2.0
    assert "negative reading" in logic.error
    assert len(h.values("out")) + len(h.dead_letters) == len(fed) + 2  # none lost


def test_a_row_that_does_not_fit_the_outlet_is_named(harness: HarnessFactory) -> None:
    # the harness raises what the runtime dead-letters (tests/streamlets/serving covers that)
    h = harness(Tripler)
    h.feed("in", _readings(1.0, 7.0))
    with pytest.raises(EncodeError, match="id"):
        h.run()


def test_a_batch_that_raises_is_run_row_by_row(harness: HarnessFactory) -> None:
    h = harness(Raiser)
    h.feed("in", _readings(1.0, 13.0, 2.0))
    h.run()
    assert [v["score"] for v in h.values("out")] == [1.0, 2.0]
    [dead] = h.dead_letters
    assert dead.kind == "logic" and "unlucky reading" in dead.error
    assert dead.value is not None and dead.value["value"] == 13.0


def test_process_columns_writes_one_outlet_that_it_names() -> None:
    class TwoOut(Streamlet):
        inp = Inlet("in", "test.Reading")
        a = Outlet("a", "test.Score")
        b = Outlet("b", "test.Score")

        def process_columns(self, batch: ColumnBatch) -> dict[str, Any]:
            return {}

    with pytest.raises(DeclarationError, match="name it with columns_outlet"):
        describe(TwoOut)

    class Named(TwoOut):
        columns_outlet = "b"

    assert describe(Named).columns_outlet == "b"
