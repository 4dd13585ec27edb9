"""Processors in the harness: per record, per batch, async, with keys and dead letters."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streamflow import Context, Inlet, Outlet, Record, Streamlet, params
from streamflow.testkit import DeadLetter, StreamletHarness

HarnessFactory = Callable[..., StreamletHarness]


class Doubler(Streamlet):
    """Scores a reading as twice its value; negative readings are skipped."""

    inp = Inlet("in", "test.Reading")
    scores = Outlet(schema="test.Score")
    factor = params.Float(default=2.0)
    window = params.Duration(default="250ms")

    def process(self, record: Record) -> dict[str, Any] | None:
        value = record.value["value"]
        if value < 0:
            return None
        if value == 13:
            raise ValueError("unlucky reading")
        return {"id": record.value["id"], "score": value * self.factor}


def test_a_per_record_processor_scores_each_fed_record(harness: HarnessFactory) -> None:
    h = harness(Doubler, config={"factor": "3"})
    h.feed("in", [{"id": "a", "value": 1.0}, {"id": "b", "value": -1.0}, {"id": "c", "value": 2.5}])
    produced = h.run()
    assert [o.value for o in produced] == h.values()
    # values come back through the Avro codec: the default of `model` is filled in
    assert h.values("scores") == [
        {"id": "a", "score": 3.0, "model": ""},
        {"id": "c", "score": 7.5, "model": ""},
    ]
    assert h.dead_letters == []
    assert h.pending == 0


def test_params_are_parsed_like_the_runtime_does(harness: HarnessFactory) -> None:
    h = harness(Doubler, config={"window": "2s"})
    streamlet = h.streamlet
    assert isinstance(streamlet, Doubler)
    assert streamlet.window == dt.timedelta(seconds=2)
    assert streamlet.factor == 2.0
    assert h.config == {"factor": 2.0, "window": dt.timedelta(seconds=2)}
    assert h.context.config == h.config


def test_keys_are_preserved_through_a_processor(harness: HarnessFactory) -> None:
    h = harness(Doubler)
    h.feed("in", [{"id": "a", "value": 1.0}, {"id": "b", "value": 2.0}], keys=["k1", None])
    h.feed("in", {"id": "c", "value": 3.0}, key="k3")
    h.run()
    assert [key for key, _ in h.outputs()] == ["k1", None, "k3"]


def test_process_feeds_one_value_and_returns_its_outputs(harness: HarnessFactory) -> None:
    h = harness(Doubler)
    (out,) = h.process({"id": "a", "value": 4.0}, key="k")
    assert (out.outlet, out.key, out.value["score"]) == ("scores", "k", 8.0)


def test_the_logic_sees_decoded_records_with_their_metadata(harness: HarnessFactory) -> None:
    seen: list[Record] = []

    class Spy(Doubler):
        def process(self, record: Record) -> None:
            seen.append(record)

    h = harness(Spy)
    h.feed("in", [{"id": "a", "value": 1.0}, {"id": "b", "value": 2.0}], key="k")
    h.run()
    first, second = seen
    assert first.value == {"id": "a", "value": 1.0, "at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC)}
    assert (first.key, first.inlet, first.topic, first.partition) == ("k", "in", "in", 0)
    assert (first.offset, second.offset) == (0, 1)
    assert second.timestamp_ms > first.timestamp_ms
    assert first.headers == {"streamflow-schema": b"test.Reading"}


def test_a_raising_record_becomes_a_dead_letter_and_the_rest_flow(harness: HarnessFactory) -> None:
    h = harness(Doubler)
    h.feed("in", [{"id": "a", "value": 1.0}, {"id": "x", "value": 13.0}, {"id": "c", "value": 2.0}])
    h.run()
    assert [v["id"] for v in h.values()] == ["a", "c"]
    (dead,) = h.dead_letters
    assert (dead.inlet, dead.kind, dead.error) == ("in", "logic", "ValueError: unlucky reading")
    assert dead.value is not None and dead.value["id"] == "x"
    assert isinstance(dead.exception, ValueError)


def test_bytes_that_do_not_decode_become_a_dead_letter(harness: HarnessFactory) -> None:
    h = harness(Doubler)
    h.feed("in", [b"not avro", {"id": "a", "value": 1.0}], keys=["bad", "good"])
    h.run()
    assert h.outputs() == [("good", {"id": "a", "score": 2.0, "model": ""})]
    assert h.dead_letters == [
        DeadLetter(
            inlet="in",
            key="bad",
            value=None,
            data=b"not avro",
            error="DecodeError: not Avro single-object encoded (expected marker C3 01, got 6e 6f)",
            kind="decode",
            exception=ValueError(),
        )
    ]


class BatchScorer(Streamlet):
    """Vectorised scoring: one call per batch, one result per input."""

    inp = Inlet("in", "test.Reading")
    scores = Outlet(schema="test.Score")
    batches: list[int]

    def setup(self, context: Context) -> None:
        self.batches = []

    def process_batch(self, records: list[Record]) -> list[Any]:
        self.batches.append(len(records))
        if any(r.value["value"] < 0 for r in records):
            raise ValueError("negative reading in batch")
        return [
            {"id": r.value["id"], "score": r.value["value"] / 10} if r.value["value"] else None
            for r in records
        ]


def test_a_batch_processor_gets_batches_of_batch_size(harness: HarnessFactory) -> None:
    h = harness(BatchScorer, batch_size=3)
    h.feed("in", [{"id": str(i), "value": float(i)} for i in range(7)], keys=list("abcdefg"))
    h.run()
    streamlet = h.streamlet
    assert isinstance(streamlet, BatchScorer)
    assert streamlet.batches == [3, 3, 1]
    # the 0.0 reading gave None: no output, and the keys still line up with their inputs
    assert [(k, v["id"]) for k, v in h.outputs()] == [
        (k, str(i)) for i, k in enumerate("bcdefg", 1)
    ]


def test_a_failing_batch_is_rerun_record_by_record(harness: HarnessFactory) -> None:
    h = harness(BatchScorer, batch_size=10)
    h.feed("in", [{"id": "a", "value": 1.0}, {"id": "p", "value": -1.0}, {"id": "c", "value": 3.0}])
    h.run()
    streamlet = h.streamlet
    assert isinstance(streamlet, BatchScorer)
    assert streamlet.batches == [3, 1, 1, 1]
    assert [v["id"] for v in h.values()] == ["a", "c"]
    assert [(d.value or {}).get("id") for d in h.dead_letters] == ["p"]


def test_a_batch_result_of_the_wrong_length_is_an_error(harness: HarnessFactory) -> None:
    class Short(BatchScorer):
        def process_batch(self, records: list[Record]) -> list[Any]:
            return [None]

    h = harness(Short)
    h.feed("in", [{"id": "a", "value": 1.0}, {"id": "b", "value": 2.0}])
    with pytest.raises(ValueError, match="returned 1 results for 2 records; it must return one"):
        h.run()


class AsyncScorer(Streamlet):
    inp = Inlet("in", "test.Reading")
    scores = Outlet(schema="test.Score")
    log: list[str]

    async def setup(self, context: Context) -> None:
        await asyncio.sleep(0)
        self.log = ["setup"]

    async def process(self, record: Record) -> Iterator[dict[str, Any]]:
        await asyncio.sleep(0.01 * (3 - len(record.value["id"])))  # finish out of order
        if record.value["value"] < 0:
            raise RuntimeError("remote model refused")
        self.log.append(record.value["id"])
        return iter([{"id": record.value["id"], "score": 1.0}])

    async def teardown(self) -> None:
        self.log.append("teardown")


def test_an_async_processor_runs_a_batch_concurrently_in_order(harness: HarnessFactory) -> None:
    h = harness(AsyncScorer)
    h.feed(
        "in", [{"id": "a", "value": 1.0}, {"id": "bb", "value": -1.0}, {"id": "ccc", "value": 1.0}]
    )
    h.run()
    streamlet = h.streamlet
    assert isinstance(streamlet, AsyncScorer)
    assert streamlet.log == ["setup", "ccc", "a"]  # concurrent: the shortest sleep first
    assert [v["id"] for v in h.values()] == ["a", "ccc"]  # but outputs keep input order
    assert [d.error for d in h.dead_letters] == ["RuntimeError: remote model refused"]
    h.teardown()
    assert streamlet.log[-1] == "teardown"


def test_the_harness_is_a_context_manager(harness: HarnessFactory) -> None:
    with harness(AsyncScorer) as h:
        streamlet = h.streamlet
        assert isinstance(streamlet, AsyncScorer)
        assert streamlet.log == ["setup"]
    assert streamlet.log == ["setup", "teardown"]


class Splitter(Streamlet):
    """A generator as process(): each reading becomes one score per unit of its value."""

    inp = Inlet("in", "test.Reading")
    scores = Outlet(schema="test.Score")

    def process(self, record: Record) -> Iterator[dict[str, Any]]:
        for i in range(int(record.value["value"])):
            if i == 2:
                raise OverflowError("too many parts")
            yield {"id": f"{record.value['id']}-{i}", "score": 1.0}


def test_a_generator_process_is_run_to_completion_per_record(harness: HarnessFactory) -> None:
    h = harness(Splitter)
    h.feed("in", [{"id": "a", "value": 2.0}, {"id": "b", "value": 5.0}, {"id": "c", "value": 1.0}])
    h.run()
    # b raised half-way: none of its outputs are written, as the runtime would dead-letter it
    assert [v["id"] for v in h.values()] == ["a-0", "a-1", "c-0"]
    assert [d.error for d in h.dead_letters] == ["OverflowError: too many parts"]
