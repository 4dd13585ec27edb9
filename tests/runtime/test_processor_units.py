"""The processing loop, one behaviour at a time, over Kafka in memory.

The same rules the broker tests check end to end (``test_dead_letters.py``,
``test_failures.py``): bad records go to the dead-letter topic while the rest
of the batch flows, a batch that backs off is retried whole and exactly once,
and offsets never move past an output that is not safe.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamflow import Inlet, Outlet, Record, Streamlet
from streamflow.api.streamlet import Backpressure
from streamflow.runtime.delivery import IDLE_FLUSH_S, DeliveryError
from tests.runtime import memory_support
from tests.runtime.memory_support import GROUP, IN, Copy, Gated


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _ids(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"r{i}"} for i in range(start, start + n)]


class _Flaky(Streamlet):
    """Backs off while its dependency is down; counts how often it saw each record."""

    inp = Inlet("in", "tests.runtime.Reading")
    out = Outlet("out", "tests.runtime.Scaled")

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.seen: dict[str, int] = {}

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        if self.down:
            raise Backpressure("the model server is down", retry_after=5.0)
        for r in records:
            self.seen[r.value["id"]] = self.seen.get(r.value["id"], 0) + 1
        return [{"id": r.value["id"]} for r in records]


class _BatchCopy(Copy):
    """A vectorised Copy that fails its whole batch on one poison record."""

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        if any(r.value.get("poison") for r in records):
            raise ValueError("a poison record in the batch")
        return [{"id": r.value["id"]} for r in records]


class _Generating(Copy):
    """Yields its outputs; the generator raises on poison after it was returned."""

    def process(self, record: Record) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        yield {"id": record.value["id"]}
        if record.value.get("poison"):
            raise ValueError("poison, found while yielding")


class _BatchOfGenerators(Copy):
    """process_batch whose per-record results are generators; one raises."""

    def process_batch(self, records: list[Record]) -> list[Iterator[dict[str, Any]]]:
        return [self._one(r) for r in records]

    @staticmethod
    def _one(record: Record) -> Iterator[dict[str, Any]]:
        if record.value.get("poison"):
            raise ValueError("poison, found while yielding")
        yield {"id": record.value["id"]}


# -- the happy path ---------------------------------------------------------------


def test_a_batch_is_output_and_its_offsets_stored_once_acknowledged(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.write(*_ids(3))
    assert rig.processor.turn() == 3
    assert rig.stored() is None  # outputs in flight: acknowledged on the next poll
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1", "r2"]
    assert rig.stored() == 3


def test_held_acknowledgements_hold_the_offsets(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.producer.hold()
    rig.write(*_ids(3))
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.stored() is None
    rig.producer.release()
    rig.delivery.poll()
    assert rig.stored() == 3


def test_a_lost_output_stops_the_loop_with_nothing_stored(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, batch_size=2)
    rig.write(*_ids(4))
    rig.producer.fail_next()
    rig.processor.turn()
    with pytest.raises(DeliveryError):
        rig.processor.turn()  # the poll of the next turn learns of the loss
    assert rig.stored() is None


# -- dead letters -------------------------------------------------------------------


def test_bad_records_are_dead_lettered_and_the_rest_flows(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.write({"id": "r0"})
    rig.write_raw("garbage", b"not json at all")
    rig.write({"id": "r1"}, {"id": "poison", "poison": True})
    rig.write({"id": "bogus", "bogus": True}, {"id": "r2"})
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1", "r2"]
    assert sorted(rig.dead) == [
        ("bogus", "encode", "EncodeError"),
        ("garbage", "decode", "DecodeError"),
        ("poison", "logic", "ValueError"),
    ]
    assert rig.stored() == 6  # nothing lost, nothing stuck


def test_a_dead_letter_keeps_the_record_and_says_what_went_wrong(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.write({"id": "r0"}, {"id": "poison", "poison": True})
    rig.processor.turn()
    rig.delivery.poll()
    [dead] = rig.broker.records(memory_support.DLQ)
    assert dead.value() == b'{"id": "poison", "poison": true}'
    headers = memory_support.headers_of(dead)
    assert headers["streamflow-error"] == b"poison record poison"
    assert headers["streamflow-error-type"] == b"ValueError"
    assert headers["streamflow-source-topic"] == IN.encode()
    assert headers["streamflow-source-partition"] == b"0"
    assert headers["streamflow-source-offset"] == b"1"


def test_a_tombstone_is_a_decode_dead_letter(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.broker.append(IN, None, b"gone")
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.dead == [("gone", "decode", "DecodeError")]
    assert rig.stored() == 1


def test_an_unacknowledged_dead_letter_holds_its_offset(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.producer.hold()
    rig.write({"id": "poison", "poison": True})
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.stored() is None
    rig.producer.release()
    rig.delivery.poll()
    assert rig.stored() == 1


def test_a_failing_process_batch_is_isolated_record_by_record(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(_BatchCopy(), loop)
    rig.write({"id": "r0"}, {"id": "poison", "poison": True}, {"id": "r1"})
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1"]
    assert rig.dead == [("poison", "logic", "ValueError")]
    assert rig.stored() == 3


def test_a_raising_generator_from_process_is_a_logic_dead_letter(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(_Generating(), loop)
    rig.write({"id": "r0"}, {"id": "poison", "poison": True})
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.outputs() == ["r0"]  # the poison record's yielded output is not written
    assert rig.dead == [("poison", "logic", "ValueError")]


def test_a_raising_generator_from_process_batch_is_a_logic_dead_letter(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(_BatchOfGenerators(), loop)
    rig.write({"id": "r0"}, {"id": "poison", "poison": True}, {"id": "r1"})
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1"]
    assert rig.dead == [("poison", "logic", "ValueError")]
    assert rig.stored() == 3


class _ShortBatch(Copy):
    """process_batch that breaks its contract: one result fewer than records."""

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        return [{"id": r.value["id"]} for r in records[1:]]


def test_a_process_batch_of_the_wrong_length_dead_letters_the_whole_batch(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(_ShortBatch(), loop)
    rig.write(*_ids(3))
    rig.processor.turn()
    rig.delivery.poll()
    assert rig.outputs() == []
    assert rig.dead == [(f"r{i}", "logic", "OutputError") for i in range(3)]
    assert rig.stored() == 3


# -- backpressure and gating ----------------------------------------------------


def test_backpressure_writes_nothing_and_rewinds_to_the_batch_start(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = _Flaky()
    streamlet.down = False
    rig = memory_support.rig(streamlet, loop, batch_size=2)
    rig.write(*_ids(4))
    rig.processor.turn()
    rig.delivery.poll()
    streamlet.down = True
    assert rig.processor.turn() == 2  # the second batch, r2 and r3, backs off
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1"]
    assert rig.broker.records(memory_support.DLQ) == []
    assert rig.consumer.position(IN) == 2
    assert rig.stored() == 2


def test_backpressure_rewinds_every_partition_of_the_batch(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(_Flaky(), loop, partitions=2)
    for partition in (0, 1):
        for i in range(3):
            rig.broker.append(IN, f'{{"id": "p{partition}.{i}"}}'.encode(), partition=partition)
    assert rig.processor.turn() == 6
    assert (rig.consumer.position(IN, 0), rig.consumer.position(IN, 1)) == (0, 0)


def test_backpressure_pauses_until_the_clock_passes_retry_after(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = _Flaky()
    rig = memory_support.rig(streamlet, loop)
    rig.write(*_ids(3))
    rig.processor.turn()
    streamlet.down = False
    rig.clock.now = 4.9
    assert rig.processor.turn() == 0
    assert rig.consumer.paused
    assert rig.processor.backing_off == "the model server is down"


def test_a_batch_that_backed_off_is_processed_exactly_once_later(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = _Flaky()
    rig = memory_support.rig(streamlet, loop)
    rig.write(*_ids(3))
    rig.processor.turn()
    streamlet.down = False
    rig.clock.now = 5.0
    assert rig.processor.turn() == 3
    assert rig.processor.turn() == 0
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1", "r2"]
    assert streamlet.seen == {"r0": 1, "r1": 1, "r2": 1}
    assert rig.stored() == 3


def test_a_streamlet_not_accepting_data_is_paused_with_nothing_consumed(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Gated(), loop)
    rig.write(*_ids(3))
    assert rig.processor.turn() == 0  # the first consume assigns, and is rewound
    assert rig.processor.turn() == 0
    assert rig.consumer.paused
    assert rig.consumer.position(IN) == 0
    assert rig.outputs() == []


def test_a_streamlet_that_starts_accepting_data_gets_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = Gated()
    rig = memory_support.rig(streamlet, loop)
    rig.write(*_ids(3))
    rig.processor.turn()
    rig.processor.turn()
    streamlet.ready = True
    assert rig.processor.turn() == 3
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1", "r2"]
    assert not rig.consumer.paused


def test_a_partition_paused_when_it_was_revoked_is_read_when_it_comes_back(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """librdkafka keeps a partition's pause through a cooperative revoke and a later
    assignment: one taken away while the model was loading came back paused for good,
    and its records were never read (a chaos run after a broker ``kill -9``)."""
    streamlet = Gated()
    rig = memory_support.rig(streamlet, loop)
    rig.write(*_ids(3))
    rig.processor.turn()  # the first consume assigns, and is rewound
    rig.processor.turn()  # paused: no model yet
    assert rig.consumer.paused
    rig.consumer.revoke()  # a rebalance takes it while it is paused
    streamlet.ready = True
    assert rig.processor.turn() == 0  # accepting now, with nothing assigned
    rig.consumer.give_back([(IN, 0)])
    assert rig.processor.turn() == 3
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1", "r2"]


def test_a_partition_given_while_the_streamlet_is_not_accepting_waits_paused(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = Gated()
    streamlet.ready = True
    rig = memory_support.rig(streamlet, loop)
    rig.write(*_ids(2))
    assert rig.processor.turn() == 2
    rig.consumer.revoke()
    streamlet.ready = False
    rig.processor.turn()
    rig.write(*_ids(2, start=2))
    rig.consumer.give_back([(IN, 0)])
    assert rig.processor.turn() == 0
    assert rig.consumer.paused
    streamlet.ready = True
    assert sum(rig.processor.turn() for _ in range(3)) == 2  # from the committed offset
    rig.delivery.poll()
    assert rig.outputs() == ["r0", "r1", "r2", "r3"]


# -- adaptive batching: linger only under load --------------------------------------


def _recorded_flushes(rig: memory_support.Rig) -> list[float]:
    """The timeout of every ``flush`` the loop asks of the producer, from now on."""
    flushes: list[float] = []
    flush = rig.producer.flush

    def recording(timeout: float = -1) -> int:
        flushes.append(timeout)
        return flush(timeout)

    rig.producer.flush = recording  # type: ignore[method-assign]
    return flushes


def test_finding_no_input_sends_what_the_last_batch_produced_at_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.producer.hold()  # in flight until released, as outputs lingering in librdkafka are
    flushes = _recorded_flushes(rig)
    rig.write(*_ids(3))
    rig.processor.turn()
    assert flushes == []
    assert rig.processor.turn() == 0  # nothing to read: the outputs need not linger
    assert flushes == [IDLE_FLUSH_S]
    rig.processor.turn()
    assert flushes == [IDLE_FLUSH_S]  # once per batch, not once per idle turn
    rig.producer.release()
    rig.write(*_ids(2, start=3))
    rig.processor.turn()
    rig.processor.turn()
    assert flushes == [IDLE_FLUSH_S, IDLE_FLUSH_S]
    assert rig.outputs() == ["r0", "r1", "r2", "r3", "r4"]
    assert rig.stored() == 5  # stored on the idle turn, once the flush drained the queue


def test_under_load_the_loop_never_waits_on_the_producer(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, batch_size=2)
    flushes = _recorded_flushes(rig)
    rig.write(*_ids(6))
    assert [rig.processor.turn() for _ in range(3)] == [2, 2, 2]
    assert flushes == []  # input was always waiting: the producer gathers it into requests


# -- revoke and shutdown ---------------------------------------------------------


def test_revoke_mid_batch_commits_exactly_what_was_output(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, batch_size=3)
    rig.write(*_ids(5))
    rig.processor.turn()  # three outputs in flight, two records left unread
    assert rig.stored() is None
    rig.consumer.revoke()
    assert rig.outputs() == ["r0", "r1", "r2"]
    assert rig.committed() == 3


def test_revoke_with_outputs_held_commits_nothing(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop, batch_size=3)
    rig.producer.hold()
    rig.write(*_ids(5))
    rig.processor.turn()
    rig.consumer.revoke()
    assert rig.committed() is None
    rig.producer.release()
    rig.delivery.poll()  # acknowledged after the partition moved: not ours to store
    assert rig.consumer.stored == {}


def test_close_flushes_and_commits_the_last_batch(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.write(*_ids(4))
    rig.processor.turn()
    rig.delivery.close(0)
    assert rig.outputs() == ["r0", "r1", "r2", "r3"]
    assert rig.committed() == 4


# -- exactly-once ------------------------------------------------------------------


def test_exactly_once_a_batch_that_is_not_full_commits_at_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=4)
    rig.write(*_ids(3))
    assert rig.processor.turn() == 3
    assert rig.producer.transactions == {"committed": 1, "aborted": 0}
    assert rig.outputs() == ["r0", "r1", "r2"]
    assert rig.committed() == 3


def test_exactly_once_full_batches_share_one_transaction_until_one_is_not_full(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Under load (full batches) a transaction's round trips are paid once for several."""
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=2)
    rig.write(*_ids(5))
    assert rig.processor.turn() == 2
    assert rig.processor.turn() == 2
    assert rig.outputs() == [] and rig.committed() is None  # one transaction, still open
    assert rig.producer.open_transaction
    assert rig.processor.turn() == 1
    assert rig.producer.transactions == {"committed": 1, "aborted": 0}
    assert rig.outputs() == ["r0", "r1", "r2", "r3", "r4"]
    assert rig.committed() == 5


def test_exactly_once_a_shared_transaction_commits_once_its_interval_is_over(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=2)
    rig.write(*_ids(8))
    rig.processor.turn()
    rig.clock.now += rig.delivery.commit_interval_s  # full batches for as long as it allows
    rig.processor.turn()
    assert rig.producer.transactions == {"committed": 1, "aborted": 0}
    assert rig.outputs() == ["r0", "r1", "r2", "r3"] and rig.committed() == 4
    rig.processor.turn()
    assert rig.committed() == 4  # the next full batch opened the next one


def test_exactly_once_finding_no_input_commits_the_shared_transaction(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=2)
    rig.write(*_ids(4))
    assert rig.processor.turn() == 2 and rig.processor.turn() == 2
    assert rig.committed() is None
    assert rig.processor.turn() == 0
    assert rig.producer.transactions == {"committed": 1, "aborted": 0}
    assert rig.outputs() == ["r0", "r1", "r2", "r3"] and rig.committed() == 4


def test_exactly_once_a_shared_transaction_that_aborts_redoes_every_batch_in_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=2)
    rig.write(*_ids(4), {"id": "poison", "poison": True})
    rig.producer.fail_call("commit_transaction", _rebalanced())
    while rig.processor.turn():
        pass
    assert rig.producer.transactions == {"committed": 0, "aborted": 1}
    assert rig.outputs() == [] and rig.dead == []
    rig.clock.now = rig.processor.backoff_until
    while rig.processor.turn():
        pass
    assert rig.producer.transactions == {"committed": 1, "aborted": 1}
    assert rig.outputs() == ["r0", "r1", "r2", "r3"]  # once each
    assert [key for key, _, _ in rig.dead] == ["poison"]  # told once, when written
    assert rig.committed() == 5


def test_exactly_once_an_abort_rewinds_each_partition_to_its_first_offset_in_the_transaction(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The shared transaction keeps each partition's first offset, not its messages: the
    partitions of every batch in it, however they interleave, are read again from there."""
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=3, partitions=2)
    for i in range(10):
        rig.broker.append(memory_support.IN, json.dumps({"id": f"r{i}"}).encode(), partition=i % 2)
    rig.producer.fail_call("commit_transaction", _rebalanced())
    while rig.processor.turn():
        pass
    assert rig.producer.transactions == {"committed": 0, "aborted": 1}
    assert rig.outputs() == []
    rig.clock.now = rig.processor.backoff_until
    while rig.processor.turn():
        pass
    assert sorted(rig.outputs()) == sorted(f"r{i}" for i in range(10))  # each once
    assert rig.broker.committed[GROUP] == {(memory_support.IN, 0): 5, (memory_support.IN, 1): 5}


def test_exactly_once_a_revoke_commits_the_shared_transaction_while_the_partition_is_ours(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=2)
    rig.write(*_ids(4))
    rig.processor.turn()
    rig.consumer.revoke()
    assert rig.producer.transactions == {"committed": 1, "aborted": 0}
    assert rig.outputs() == ["r0", "r1"] and rig.committed() == 2


def test_exactly_once_a_shared_transaction_aborted_in_a_revoke_is_redone_by_each_owner(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The commit in the rebalance callback fails: partition 0 leaves with nothing of
    ours committed (its new owner starts from the committed offset); partition 1 stays
    and is rewound, and what the consume call had taken of it is not processed."""
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=2, partitions=2)
    for i in range(8):
        rig.broker.append(memory_support.IN, json.dumps({"id": f"r{i}"}).encode(), partition=i % 2)
    assert rig.processor.turn() == 2  # full: the transaction stays open
    rig.producer.fail_call("commit_transaction", _rebalanced())
    real = rig.consumer.consume

    def revoking(num_messages: int = 1, timeout: float = -1) -> list[Any]:
        rig.consumer.consume = real  # type: ignore[method-assign]
        rig.consumer.revoke([(memory_support.IN, 0)])
        return real(num_messages, timeout)

    rig.consumer.consume = revoking  # type: ignore[method-assign]
    assert rig.processor.turn() == 0  # the batch it took lies past the rewind: not processed
    assert rig.producer.transactions == {"committed": 0, "aborted": 1}
    assert "generation id is not valid" in (rig.processor.backing_off or "")
    rig.clock.now = rig.processor.backoff_until
    while rig.processor.turn():
        pass
    assert sorted(rig.outputs()) == ["r1", "r3", "r5", "r7"]  # partition 1's, once each
    assert rig.broker.committed.get(GROUP, {}) == {(memory_support.IN, 1): 4}


def test_exactly_once_an_output_outside_the_batches_commits_the_shared_transaction_first(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True, batch_size=2)
    rig.write(*_ids(4))
    rig.processor.turn()
    bad = rig.broker.append("control", b"not a descriptor", b"c")
    rig.processor.reject_control(bad, "control", ValueError("unreadable"))
    assert rig.producer.transactions == {"committed": 2, "aborted": 0}
    assert rig.outputs() == ["r0", "r1"] and rig.committed() == 2
    assert list(rig.dead_letters()) == ["c"]


class _StopsAt(Copy):
    """Asks the loop to stop once it has copied ``last`` (a SIGTERM, as it were)."""

    def __init__(self, last: str) -> None:
        super().__init__()
        self.last = last
        self.stop = threading.Event()

    def process(self, record: Record) -> dict[str, Any]:
        if record.value["id"] == self.last:
            self.stop.set()
        return super().process(record)


def test_exactly_once_stopping_commits_the_shared_transaction(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = _StopsAt("r3")
    rig = memory_support.rig(streamlet, loop, exactly_once=True, batch_size=2)
    rig.processor.stop = streamlet.stop
    rig.write(*_ids(6))
    rig.processor.run()  # two full batches, then the stop
    assert rig.producer.transactions == {"committed": 1, "aborted": 0}
    assert rig.outputs() == ["r0", "r1", "r2", "r3"] and rig.committed() == 4


def test_exactly_once_dead_letters_commit_with_their_batch(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True)
    rig.write({"id": "r0"}, {"id": "poison", "poison": True})
    rig.processor.turn()
    assert rig.producer.transactions["committed"] == 1
    assert rig.outputs() == ["r0"]
    assert list(rig.dead_letters()) == ["poison"]
    assert rig.committed() == 2


def test_exactly_once_a_retried_batch_counts_its_dead_letter_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The metrics, the hook and the log tell of a dead letter once it is written: before,
    a batch whose transaction aborted and was retried counted its dead letters twice."""
    rig = memory_support.rig(Copy(), loop, exactly_once=True)
    rig.write({"id": "r0"}, {"id": "poison", "poison": True})
    rig.producer.fail_call("commit_transaction", _rebalanced())
    rig.processor.turn()
    assert rig.producer.transactions["aborted"] == 1 and rig.dead == []
    rig.clock.now = rig.processor.backoff_until
    rig.processor.turn()
    assert list(rig.dead_letters()) == ["poison"]
    assert len(rig.dead) == 1
    registry = rig.processor.metrics.registry
    labels = {**rig.processor.metrics.labels, "port": "in"}
    assert registry.get_sample_value("streamflow_records_dlq_total", labels) == 1


def test_exactly_once_a_fatal_error_ends_the_replica_with_nothing_shown(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True)
    rig.write(*_ids(3))
    fenced = KafkaError(KafkaError._FENCED, "fenced by a newer producer", fatal=True)
    rig.producer.fail_call("commit_transaction", KafkaException(fenced))
    with pytest.raises(DeliveryError, match="fenced"):
        rig.processor.turn()
    assert rig.producer.transactions == {"committed": 0, "aborted": 1}
    assert rig.outputs() == []
    assert GROUP not in rig.broker.committed


def _rebalanced() -> KafkaException:
    """What librdkafka raises when the group rebalanced while the transaction was open."""
    return KafkaException(
        KafkaError(
            KafkaError.ILLEGAL_GENERATION,
            "Broker: Specified group generation id is not valid",
            txn_requires_abort=True,
        )
    )


def test_exactly_once_a_rebalance_in_the_transaction_aborts_and_retries_the_batch(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Issue 17: ILLEGAL_GENERATION while sending the offsets crashed the replica."""
    rig = memory_support.rig(Copy(), loop, exactly_once=True)
    rig.write(*_ids(3))
    rig.producer.fail_call("send_offsets_to_transaction", _rebalanced())
    assert rig.processor.turn() == 3  # no exception: the batch is handed back
    assert rig.producer.transactions == {"committed": 0, "aborted": 1}
    assert rig.outputs() == [] and rig.committed() is None
    assert "generation id is not valid" in (rig.processor.backing_off or "")
    assert rig.processor.turn() == 0  # waits out retry_after on the clock, no sleeping
    rig.clock.now = rig.processor.backoff_until
    rig.processor.turn()
    assert rig.producer.transactions == {"committed": 1, "aborted": 1}
    assert rig.outputs() == ["r0", "r1", "r2"]  # once each
    assert rig.committed() == 3


def test_exactly_once_gives_up_after_aborts_in_a_row(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop, exactly_once=True)
    rig.write(*_ids(2))
    with pytest.raises(DeliveryError, match="9 transactions aborted in a row"):
        for _ in range(20):
            rig.producer.fail_call("commit_transaction", _rebalanced())
            rig.clock.now = rig.processor.backoff_until
            rig.processor.turn()
    assert rig.outputs() == []


class _RevokedMidBatch(Copy):
    """Loses partition 1 to a rebalance while its batch is being processed."""

    def __init__(self, consumer: Any) -> None:
        super().__init__()
        self.consumer = consumer

    def process(self, record: Record) -> dict[str, Any]:
        if self.consumer.assignment() and len(self.consumer.assignment()) == 2:
            self.consumer.revoke([(memory_support.IN, 1)])
        return super().process(record)


def test_exactly_once_a_partition_revoked_mid_batch_is_left_to_its_new_owner(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = _RevokedMidBatch(consumer=None)
    rig = memory_support.rig(streamlet, loop, exactly_once=True, partitions=2)
    streamlet.consumer = rig.consumer
    for i in range(4):
        rig.broker.append(memory_support.IN, json.dumps({"id": f"r{i}"}).encode(), partition=i % 2)
    rig.producer.fail_call("send_offsets_to_transaction", _rebalanced())
    rig.processor.turn()  # partition 1 cannot be rewound: not an error
    rig.clock.now = rig.processor.backoff_until
    while rig.processor.turn():
        pass
    assert sorted(rig.outputs()) == ["r0", "r2"]  # partition 0's, once each
    assert rig.broker.committed.get(GROUP, {}) == {(memory_support.IN, 0): 2}


def _revoking_on_third_consume(rig: memory_support.Rig, partition: int) -> None:
    """The batch gathers over three ``consume`` calls: nothing yet, then one record, then
    the rest; a rebalance takes ``partition`` inside the third, after its record was taken."""
    real, calls = rig.consumer.consume, []

    def consume(num_messages: int = 1, timeout: float = -1) -> list[Any]:
        calls.append(num_messages)
        if len(calls) == 1:
            return []
        if len(calls) == 3:
            rig.consumer.revoke([(memory_support.IN, partition)])
        return real(num_messages, timeout)

    rig.consumer.consume = consume  # type: ignore[method-assign]


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_record_taken_before_its_partition_was_revoked_is_left_to_its_new_owner(
    loop: asyncio.AbstractEventLoop, exactly_once: bool
) -> None:
    """A batch is gathered over several ``consume`` calls; librdkafka drops the records of
    a revoked partition only within one call. The ones taken before it, processed, were
    written twice (here and by the partition's new owner) and, under exactly-once, their
    offsets committed by a replica that no longer owned them (the chaos suite's model
    server outage, 10 ids twice in a clean-clone CI run)."""
    rig = memory_support.rig(Copy(), loop, exactly_once=exactly_once, partitions=2)
    for i in range(4):
        rig.broker.append(memory_support.IN, json.dumps({"id": f"r{i}"}).encode(), partition=i % 2)
    _revoking_on_third_consume(rig, partition=0)  # r0, the first record taken, is partition 0's
    assert rig.processor.turn() == 2
    rig.delivery.poll()
    rig.delivery.idle()
    assert rig.outputs() == ["r1", "r3"]  # partition 1's only
    committed = rig.broker.committed.get(GROUP, {})
    assert (memory_support.IN, 0) not in committed  # nothing of the revoked partition
    if exactly_once:
        assert committed == {(memory_support.IN, 1): 2}


def test_exactly_once_backpressure_opens_no_transaction(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(_Flaky(), loop, exactly_once=True)
    rig.write(*_ids(3))
    rig.processor.turn()
    assert rig.producer.transactions == {"committed": 0, "aborted": 0}
    assert not rig.producer.open_transaction


# -- liveness: what the loop tells its health -------------------------------------------


def test_a_batch_taken_is_progress(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop)
    health = rig.processor.health
    rig.processor.turn()
    health.last_progress = -1.0
    assert rig.processor.turn() == 0
    assert health.last_progress == -1.0  # nothing came: no progress (nor any work)
    rig.write(*_ids(3))
    assert rig.processor.turn() == 3
    assert health.last_progress > 0
    assert health.activity == "writing the batch's outputs and committing it"


def test_backing_off_is_waiting_on_a_dependency_not_a_stall(
    loop: asyncio.AbstractEventLoop,
) -> None:
    streamlet = _Flaky()
    rig = memory_support.rig(streamlet, loop)
    health = rig.processor.health
    rig.write(*_ids(5))
    rig.processor.turn()  # backs off: the model server is down
    health.last_progress = -1.0
    rig.processor.turn()  # records wait, none is taken, and that is not the replica's fault
    assert health.last_progress > 0


def test_a_stall_names_the_streamlet_s_logic(loop: asyncio.AbstractEventLoop) -> None:
    seen: list[str] = []

    class Watching(Copy):
        def process(self, record: Record) -> dict[str, Any]:
            seen.append(rig.processor.health.activity)
            return super().process(record)

    rig = memory_support.rig(Watching(), loop)
    rig.write(*_ids(1))
    rig.processor.turn()
    rig.processor.turn()
    assert seen == ["the streamlet's process"]
