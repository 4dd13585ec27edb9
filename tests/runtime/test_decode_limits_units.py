"""Decoding in the processor: a batch is cut at ``decode_limits.max_batch_bytes``, and
whatever a codec raises on a record is that record's dead letter.

What does not fit is read again as the next batch, so nothing is dead-lettered
for being in a big batch and nothing is lost: every record comes out once, in
order, and the offsets end past the last one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from streamflow import Record
from tests.runtime import memory_support
from tests.runtime.memory_support import Copy


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


class _Batches(Copy):
    """Copy, keeping the size of each batch its logic was given."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def process_batch(self, records: list[Record]) -> list[Any]:
        self.sizes.append(len(records))
        return [self.process(r) for r in records]


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_batch_past_its_decoded_size_is_cut_and_the_rest_follows(
    loop: asyncio.AbstractEventLoop, exactly_once: bool
) -> None:
    streamlet = _Batches()
    rig = memory_support.rig(streamlet, loop, batch_size=50, exactly_once=exactly_once)
    rig.write(*[{"id": f"r{i:02d}"} for i in range(40)])  # 13 bytes each, decoded (here)
    rig.processor.bindings.max_batch_bytes = 13 * 15  # 15 records a batch
    for _ in range(10):
        if rig.processor.turn() == 0 and len(rig.outputs()) == 40:
            break
        rig.delivery.poll()
    rig.processor.stop.set()
    rig.processor.turn()
    assert rig.outputs() == [f"r{i:02d}" for i in range(40)]  # each once, in order
    assert streamlet.sizes == [15, 15, 10]
    assert rig.dead == []
    assert (rig.committed() if exactly_once else rig.stored()) == 40


def test_a_record_larger_than_the_batch_budget_alone_still_goes_through(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A batch always takes its first record (a record past the record limit is refused
    by its codec before this): the budget cuts batches, it never starves one."""
    streamlet = _Batches()
    rig = memory_support.rig(streamlet, loop, batch_size=10)
    rig.write(*[{"id": f"r{i}"} for i in range(3)])
    rig.processor.bindings.max_batch_bytes = 1
    for _ in range(5):
        rig.processor.turn()
        rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1", "r2"]
    assert streamlet.sizes == [1, 1, 1]
    assert rig.stored() == 3


class _Brittle(memory_support.JsonCodec):
    """A codec with a bug: some bytes make it raise something other than DecodeError."""

    def decode(self, data: bytes) -> dict[str, Any]:
        if b"deep" in data:
            raise RecursionError("maximum recursion depth exceeded")
        return super().decode(data)


def test_a_codec_failing_on_a_record_dead_letters_it_and_the_replica_goes_on(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Whatever a codec raises on a record's bytes is that record's dead letter, never a
    crash (a crash would re-read the record at every restart: a crash loop)."""
    rig = memory_support.rig(Copy(), loop)
    rig.processor.bindings.inlets_by_topic[memory_support.IN] = (
        "in",
        _Brittle("tests.runtime.Reading"),
    )
    rig.write({"id": "r0"}, {"id": "deep"}, {"id": "r2"})
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r2"]
    assert rig.dead == [("deep", "decode", "DecodeError")]
    error = rig.dead_letters()["deep"]["streamflow-error"].decode()
    assert error == "cannot decode: RecursionError: maximum recursion depth exceeded"
    assert rig.stored() == 3
