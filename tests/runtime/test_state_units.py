"""Durable state, one behaviour per test: the real processor and stores, Kafka in memory.

A "restart" here is a new processor (a new consumer, producer and streamlet)
over the same broker: with the same state directory it is a replica restarted
on its machine, with a fresh one a replica rescheduled elsewhere, which has
only the changelog.
"""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException

from streamflow import Inlet, Outlet, Record, Streamlet
from streamflow.api.descriptor import DeclarationError, describe
from streamflow.api.state import StateError
from streamflow.api.streamlet import Backpressure
from streamflow.runtime.inmemory import MemoryBroker
from streamflow.runtime.state import codec
from tests.runtime import memory_support
from tests.runtime.memory_support import CHANGELOG, Rig

_READING, _SCALED = "tests.runtime.Reading", "tests.runtime.Scaled"


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


class Counter(Streamlet):
    """Counts records per id; an output says how many of its id came before it, itself too."""

    stateful = True
    inp = Inlet("in", _READING)
    out = Outlet("out", _SCALED)

    def __init__(self) -> None:
        super().__init__()
        self.down = False  # a dependency is down: back off after counting

    def process(self, record: Record) -> dict[str, Any]:
        store = self.state.of(record)
        seen = store.get(record.value["id"], 0) + 1
        store.set(record.value["id"], seen)
        if record.value.get("poison"):
            raise ValueError("poison, after a write")
        if self.down:
            raise Backpressure("down", retry_after=1.0)
        return {"id": record.value["id"], "seq": seen}


class BatchCounter(Counter):
    """The same, per batch: a poison record fails the whole call, then is isolated."""

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        return [self.process(r) for r in records]


def _start(
    loop: asyncio.AbstractEventLoop,
    state_dir: Path,
    *,
    broker: MemoryBroker | None = None,
    streamlet: Streamlet | None = None,
    exactly_once: bool = False,
    batch_size: int = 100,
) -> Rig:
    return memory_support.rig(
        streamlet or Counter(),
        loop,
        broker=broker,
        state_dir=state_dir,
        exactly_once=exactly_once,
        batch_size=batch_size,
    )


def _feed(r: Rig, ids: list[str]) -> None:
    r.write(*({"id": i} for i in ids))


def _turn(r: Rig) -> None:
    while r.processor.turn():
        pass
    r.delivery.poll()


def _seqs(r: Rig) -> list[tuple[str, int]]:
    return [(v["id"], v["seq"]) for v in (json.loads(m.value()) for m in r.broker.records("out"))]


def test_the_state_is_there_after_a_restart_on_the_same_machine(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    first = _start(loop, tmp_path)
    _feed(first, ["a", "b", "a"])
    _turn(first)
    first.consumer.revoke()  # a clean stop: offsets committed, the stores checkpointed

    second = _start(loop, tmp_path, broker=first.broker)
    _feed(second, ["a", "b"])
    _turn(second)
    assert _seqs(second)[-2:] == [("a", 3), ("b", 2)]
    # the file was checkpointed at close: nothing of the changelog was read again
    assert [r.records for r in second.processor.state.restored] == [0]  # type: ignore[union-attr]


def test_a_replica_elsewhere_restores_the_state_from_the_changelog_alone(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    first = _start(loop, tmp_path / "one", exactly_once=True)
    _feed(first, ["a", "b", "a", "c"])
    _turn(first)
    # killed: nothing closed, nothing checkpointed; the next owner has another disk
    second = _start(loop, tmp_path / "two", broker=first.broker, exactly_once=True)
    _feed(second, ["a", "c"])
    _turn(second)
    assert _seqs(second)[-2:] == [("a", 3), ("c", 2)]
    restored = second.processor.state.restored  # type: ignore[union-attr]
    assert [(r.records, r.wiped) for r in restored] == [(3, True)]  # a, b, c: one batch


def test_at_least_once_a_replayed_record_counts_again(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    """The documented difference: state is written before the offsets, so after a kill
    the records since the last commit are applied to the restored state a second time."""
    first = _start(loop, tmp_path / "one")
    _feed(first, ["a", "b", "a"])
    _turn(first)
    assert first.committed() is None  # killed before librdkafka's commit interval
    second = _start(loop, tmp_path / "two", broker=first.broker)
    _turn(second)
    assert _seqs(second)[-3:] == [("a", 3), ("b", 2), ("a", 4)]


def test_a_batch_that_backs_off_is_counted_once(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    counter = Counter()
    r = _start(loop, tmp_path, streamlet=counter)
    _feed(r, ["a", "a"])
    counter.down = True
    r.processor.turn()  # counted twice in memory, then handed back
    assert r.broker.records(CHANGELOG) == []
    counter.down = False
    r.clock.now = r.processor.backoff_until
    _turn(r)
    assert _seqs(r) == [("a", 1), ("a", 2)]
    assert [m.value() for m in r.broker.records(CHANGELOG)] == [codec.encode(2)]


def test_an_aborted_transaction_leaves_neither_outputs_nor_state(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    r = _start(loop, tmp_path, exactly_once=True)
    _feed(r, ["a", "b"])
    lost = KafkaError(KafkaError._TIMED_OUT, "timed out")  # not retriable: abort, rewind
    r.producer.fail_call("commit_transaction", KafkaException(lost))
    r.processor.turn()
    assert r.broker.records(CHANGELOG) == [] and r.broker.records("out") == []
    r.clock.now = r.processor.backoff_until
    _turn(r)
    assert _seqs(r) == [("a", 1), ("b", 1)]
    # what a replica elsewhere would restore: the committed transaction's writes only
    second = _start(loop, tmp_path / "elsewhere", broker=r.broker, exactly_once=True)
    _feed(second, ["a"])
    _turn(second)
    assert _seqs(second)[-1] == ("a", 2)


def test_a_record_whose_logic_raises_leaves_no_state_behind(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    r = _start(loop, tmp_path)
    r.write({"id": "a"}, {"id": "a", "poison": True}, {"id": "a"})
    _turn(r)
    assert _seqs(r) == [("a", 1), ("a", 2)]
    assert [kind for _, kind, _ in r.dead] == ["logic"]


def test_a_failed_batch_call_is_redone_record_by_record_from_its_starting_state(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    r = _start(loop, tmp_path, streamlet=BatchCounter())
    r.write({"id": "a"}, {"id": "a"}, {"id": "a", "poison": True}, {"id": "a"})
    _turn(r)
    assert _seqs(r) == [("a", 1), ("a", 2), ("a", 3)]
    assert [kind for _, kind, _ in r.dead] == ["logic"]


class _WritesOnControl(Counter):
    def between_batches(self) -> None:
        for inlet, partition in self.state:
            self.state.partition(inlet, partition).set("between", 1)


def test_state_is_written_only_by_batch_logic(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    r = _start(loop, tmp_path, streamlet=_WritesOnControl())
    _feed(r, ["a"])
    r.processor.turn()  # assigned and restored during this turn's consume
    with pytest.raises(StateError, match="only in process or process_batch"):
        r.processor.between_batches()
    # reading is fine anywhere
    assert r.processor.streamlet.state.partition("in", 0).get("a") == 1


class _Unstorable(Counter):
    def process(self, record: Record) -> dict[str, Any]:
        self.state.of(record).set("handle", object())
        return {"id": "x", "seq": 0}


def test_a_value_that_cannot_be_stored_is_refused_where_the_logic_sets_it(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    r = _start(loop, tmp_path, streamlet=_Unstorable())
    _feed(r, ["a", "b"])
    _turn(r)
    assert [(kind, error) for _, kind, error in r.dead] == [("logic", "TypeError")] * 2
    assert r.broker.records(CHANGELOG) == []
    with pytest.raises(TypeError, match="not a storable state value: object"):
        codec.encode({"x": [object()]})


def test_a_partition_taken_away_takes_its_state_along(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    r = memory_support.rig(Counter(), loop, partitions=2, state_dir=tmp_path / "one")
    r.broker.append("in", json.dumps({"id": "a"}).encode(), b"a", partition=0)
    r.broker.append("in", json.dumps({"id": "b"}).encode(), b"b", partition=1)
    _turn(r)
    state = r.processor.streamlet.state
    assert state.held() == [("in", 0), ("in", 1)]
    r.consumer.revoke([("in", 1)])
    assert state.held() == [("in", 0)]
    with pytest.raises(StateError, match=r"no state for in\[1\]: this replica holds in\[0\]"):
        state.partition("in", 1)
    with pytest.raises(StateError, match="'nope' is not a data inlet"):
        state.partition("nope", 0)


def test_a_local_copy_of_another_changelog_is_thrown_away(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    first = _start(loop, tmp_path)
    _feed(first, ["a", "a", "a"])
    _turn(first)
    first.consumer.revoke()
    # the application was undeployed with its topics and deployed again: a new changelog
    # and input, the same directory on this machine, and more written since
    broker = MemoryBroker()
    broker.create_topic(CHANGELOG)
    for _ in range(5):
        broker.append(CHANGELOG, codec.encode(7), b"z")
    second = _start(loop, tmp_path, broker=broker)
    _feed(second, ["a", "z"])
    _turn(second)
    assert _seqs(second) == [("a", 1), ("z", 8)]


def test_a_pickle_in_the_changelog_is_never_run(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    broker = MemoryBroker()
    broker.create_topic(CHANGELOG)
    broker.append(CHANGELOG, pickle.dumps(Exploit()), b"a")
    r = _start(loop, tmp_path / "state", broker=broker)
    _feed(r, ["a", "b"])
    _turn(r)
    assert not marker.exists()
    assert _seqs(r) == [("b", 1)]  # "a" could not read its state: dead-lettered, saying why
    assert r.dead == [("a", "logic", "StateError")]
    error = r.dead_letters()["a"]["streamflow-error"].decode()
    assert "the state of in[0] under 'a' is unreadable" in error


def test_values_keep_their_types() -> None:
    value = {
        "rows": np.arange(6, dtype=np.float32).reshape(2, 3),
        "names": np.array(["x", "yy"], dtype=object),
        "span": (1, 2),
        "blob": b"\x00\x01",
        "nested": [{"ok": True, "n": None}],
        "count": np.int64(3),
    }
    back = codec.decode(codec.encode(value))
    assert back["rows"].dtype == np.float32 and back["rows"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert back["names"].tolist() == ["x", "yy"] and back["span"] == (1, 2)
    assert back["blob"] == b"\x00\x01" and back["nested"] == [{"ok": True, "n": None}]
    assert back["count"] == 3 and type(back["count"]) is int


class _NotStateful(Streamlet):
    inp = Inlet("in", _READING)
    out = Outlet("out", _SCALED)

    def process(self, record: Record) -> None:
        return None


def test_a_streamlet_that_did_not_ask_for_state_is_told_how() -> None:
    with pytest.raises(StateError, match="set `stateful = True` on the class"):
        _ = _NotStateful().state
    assert describe(Counter).stateful and not describe(_NotStateful).stateful


def test_a_stateful_streamlet_needs_a_data_inlet() -> None:
    class Source(Streamlet):
        stateful = True
        out = Outlet("out", _SCALED)

        def source(self) -> Iterator[dict[str, Any]]:
            yield {}

    with pytest.raises(DeclarationError, match="stateful but has no data inlet"):
        describe(Source)


class _OneAtATime(Counter):
    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        out = [self.process(r) for r in records]
        if any(r.value.get("fail_batch") for r in records):
            raise RuntimeError("the whole call failed, after its writes")
        return out


def test_a_batch_call_that_raises_on_its_only_record_keeps_none_of_its_writes(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    r = memory_support.rig(_OneAtATime(), loop, state_dir=tmp_path, batch_size=1)
    r.write({"id": "a"}, {"id": "a", "fail_batch": True}, {"id": "a"})
    _turn(r)
    assert _seqs(r) == [("a", 1), ("a", 2)]
    assert [kind for _, kind, _ in r.dead] == ["logic"]


def test_under_exactly_once_batches_of_a_stateful_streamlet_never_share_a_transaction(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    """Its stores commit with each batch, so each full batch commits its own transaction
    (a stateless one lets full batches share one, test_processor_units.py)."""
    rig = _start(loop, tmp_path, exactly_once=True, batch_size=2)
    rig.write(*({"id": f"k{i}"} for i in range(4)))
    assert rig.processor.turn() == 2
    assert rig.producer.transactions == {"committed": 1, "aborted": 0}
    assert rig.committed() == 2
