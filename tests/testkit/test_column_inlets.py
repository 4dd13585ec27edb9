"""``column_inlets``: a ``process_batch`` streamlet reads chosen inlets as columns too.

The real processor runs in the harness. What a user relies on: the records keep
their order across inlets and their values are what the record path gives; the
columns of any run of those records come back from ``columns_of``, row for row;
a record that does not decode is a dead letter with the record path's reason, and
the rest of the batch goes on; other inlets, and records built by hand, have none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from streamflow import Inlet, Outlet, Record, Streamlet
from streamflow.api.columns import ColumnBatch, columns_of
from streamflow.api.descriptor import DeclarationError, describe
from streamflow.testkit import StreamletHarness

HarnessFactory = Callable[..., StreamletHarness]

SEEN: list[tuple[list[Record], ColumnBatch | None, ColumnBatch | None]] = []


class Watch(Streamlet):
    inp = Inlet("in", "test.Reading")
    scores = Inlet("scores", "test.Score")
    out = Outlet("out", "test.Score")
    column_inlets = ("in",)

    def process_batch(self, records: list[Record]) -> list[Any]:
        readings = [r for r in records if r.inlet == "in"]
        SEEN.append((list(records), columns_of(readings), columns_of(readings[1:])))
        return [
            {"id": r.value["id"], "score": r.value.get("value", r.value.get("score"))}
            for r in records
        ]


class PerRecord(Watch):
    column_inlets = ()


def _readings(*values: float) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "value": v} for i, v in enumerate(values)]


def test_a_column_inlets_records_come_with_their_columns(harness: HarnessFactory) -> None:
    SEEN.clear()
    h = harness(Watch)
    h.feed("in", _readings(1.0, 2.5, 4.0), keys=["a", None, "c"])
    h.feed("scores", [{"id": "s0", "score": 0.5}])
    h.run()
    assert describe(Watch).column_inlets == ("in",)
    [(records, batch, tail)] = SEEN
    readings = [r for r in records if r.inlet == "in"]
    assert batch is not None and batch.inlet == "in" and batch.n == 3
    assert isinstance(batch["value"], np.ndarray) and batch["value"].tolist() == [1.0, 2.5, 4.0]
    assert batch.records() == [r.value for r in readings]
    assert [r.key for r in readings] == ["a", None, "c"]
    assert tail is not None and tail["id"].tolist() == ["r1", "r2"]  # a run: its rows
    # the other inlet is read record by record, as before
    assert columns_of([r for r in records if r.inlet == "scores"]) is None
    assert columns_of([Record({"id": "x", "value": 1.0}, inlet="in")]) is None
    assert columns_of([]) is None


def test_values_and_order_are_the_record_paths(harness: HarnessFactory) -> None:
    def run(cls: type[Streamlet]) -> list[tuple[str, dict[str, Any]]]:
        SEEN.clear()
        h = harness(cls)
        h.feed("in", _readings(1.0, 2.0))
        h.feed("scores", [{"id": "s0", "score": 0.5}])
        h.feed("in", _readings(3.0))
        h.run()
        return [(r.inlet, r.value) for records, _, _ in SEEN for r in records]

    assert run(Watch) == run(PerRecord)


def test_a_record_that_does_not_decode_fails_alone_and_nothing_is_lost(
    harness: HarnessFactory,
) -> None:
    SEEN.clear()
    h = harness(Watch)
    fed = _readings(1.0, 2.0)
    h.feed("in", fed[:1])
    h.feed("in", b"\xc3\x01 not a reading")
    h.feed("in", fed[1:])
    h.run()
    [dead] = h.dead_letters
    assert dead.kind == "decode" and dead.error.startswith("DecodeError")
    per_record = harness(PerRecord)
    per_record.feed("in", b"\xc3\x01 not a reading")
    per_record.run()
    assert [d.error for d in per_record.dead_letters] == [dead.error]  # the same reason
    [(_, batch, _)] = SEEN
    assert batch is not None and batch["id"].tolist() == ["r0", "r1"]
    assert len(h.values("out")) + len(h.dead_letters) == len(fed) + 1  # none lost


@pytest.mark.parametrize(
    ("named", "problem"),
    [
        (("inp",), "names 'inp', which is not one of the streamlet's data inlets"),
        (("control",), "names 'control', which is not one of the streamlet's data inlets"),
        ("in", "must be a tuple of inlet names"),
        (None, "must be a tuple of inlet names"),
    ],
)
def test_column_inlets_must_name_data_inlets(named: Any, problem: str) -> None:
    from streamflow.api.ports import ControlInlet

    class Bad(Streamlet):
        inp = Inlet("in", "test.Reading")
        control = ControlInlet("control", "test.Score")
        out = Outlet("out", "test.Score")
        column_inlets = named

        def process_batch(self, records: list[Record]) -> list[Any]:
            return []

    with pytest.raises(DeclarationError, match=problem):
        describe(Bad)


def test_a_value_the_logic_sets_parts_the_record_from_its_columns(
    harness: HarnessFactory,
) -> None:
    SEEN.clear()
    h = harness(Watch)
    h.feed("in", _readings(1.0, 2.0))
    h.run()
    [(records, batch, _)] = SEEN
    assert batch is not None and columns_of(records[:1]) is not None
    records[0].value = {"id": "changed", "value": 9.0}
    assert records[0].value == {"id": "changed", "value": 9.0}
    assert columns_of(records[:1]) is None  # its columns would say otherwise
    assert columns_of(records[1:]) is not None
