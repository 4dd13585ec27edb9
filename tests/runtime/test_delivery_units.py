"""Delivery guarantees, one rule at a time, over Kafka in memory.

At-least-once stores a batch's offsets only once every output produced before
them is acknowledged (the producer reports only failures, so "the queue is
empty" is the sign), flushing at most every store interval under load;
exactly-once makes a batch's outputs and offsets visible together, or neither.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from streamflow.runtime.clients import KafkaClients, config_from_env
from streamflow.runtime.delivery import (
    AtLeastOnce,
    CallWatchdog,
    DeliveryError,
    FailedOutputs,
)
from streamflow.runtime.inmemory import MemoryBroker, MemoryConsumer, MemoryProducer
from streamflow.runtime.transactions import ExactlyOnce, TransactionAborted
from tests.runtime.memory_support import GROUP, IN, OUT, ManualClock


def _consuming(broker: MemoryBroker, records: int) -> MemoryConsumer:
    """A consumer of ``in`` that has been assigned its partition and read ``records``."""
    for i in range(records):
        broker.append(IN, f"r{i}".encode())
    consumer = MemoryConsumer(broker, group=GROUP)
    consumer.subscribe([IN])
    consumer.consume(records)
    return consumer


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _at_least_once(
    records: int = 10, *, queue_limit: int = 100_000, clock: _Clock | None = None
) -> tuple[AtLeastOnce, MemoryProducer, MemoryConsumer]:
    broker = MemoryBroker()
    consumer = _consuming(broker, records)
    failures = FailedOutputs()
    producer = MemoryProducer(broker, queue_limit=queue_limit, config=failures.producer_config())
    delivery = AtLeastOnce(
        cast(Producer, producer), cast(Consumer, consumer), failures, clock=clock or _Clock()
    )
    return delivery, producer, consumer


def _batch(delivery: AtLeastOnce | ExactlyOnce, outputs: int, next_offset: int) -> None:
    """One input batch that ends at ``next_offset`` (exclusive) and writes ``outputs``."""
    delivery.begin_batch()
    for i in range(outputs):
        delivery.produce(OUT, f"o{next_offset}.{i}".encode(), None, [])
    delivery.end_batch({(IN, 0): next_offset})


# -- at-least-once: the offset gate --------------------------------------------


def test_an_unacknowledged_output_keeps_its_batch_offsets_unstored() -> None:
    delivery, producer, consumer = _at_least_once()
    producer.hold()
    _batch(delivery, outputs=2, next_offset=3)
    delivery.poll()
    assert consumer.stored == {}


def test_acknowledged_outputs_store_their_batch_offsets() -> None:
    delivery, producer, consumer = _at_least_once()
    producer.hold()
    _batch(delivery, outputs=2, next_offset=3)
    producer.release()
    assert consumer.stored == {}  # acknowledgements arrive in poll, not on release
    delivery.poll()
    assert consumer.stored == {(IN, 0): 3}


def test_a_batch_finished_early_waits_for_the_earlier_batch() -> None:
    delivery, producer, consumer = _at_least_once()
    producer.hold()
    _batch(delivery, outputs=1, next_offset=3)  # in flight
    _batch(delivery, outputs=0, next_offset=6)  # nothing to acknowledge: finished at once
    delivery.poll()
    assert consumer.stored == {}
    producer.release()
    delivery.poll()
    assert consumer.stored == {(IN, 0): 6}


def test_batches_are_stored_in_order_as_they_are_acknowledged() -> None:
    delivery, producer, consumer = _at_least_once()
    _batch(delivery, outputs=1, next_offset=3)
    delivery.poll()
    assert consumer.stored == {(IN, 0): 3}
    producer.hold()
    _batch(delivery, outputs=1, next_offset=7)
    delivery.poll()
    assert consumer.stored == {(IN, 0): 3}


def test_under_load_the_offsets_wait_for_the_store_interval_then_a_flush() -> None:
    clock = _Clock()
    delivery, producer, consumer = _at_least_once(clock=clock)
    delivery.poll()  # nothing finished yet: nothing to store
    producer.hold()  # the queue never drains by itself, as under load
    _batch(delivery, outputs=2, next_offset=3)
    clock.now = 0.9
    delivery.poll()
    assert consumer.stored == {} and delivery.waiting == {(IN, 0): 3}
    producer.release()  # the next flush succeeds
    _batch(delivery, outputs=1, next_offset=5)
    clock.now = 1.0  # a store interval after the last store: flush, then store
    producer.hold()
    delivery.poll()  # held: the flush times out and nothing is stored
    assert consumer.stored == {}
    producer.release()
    delivery.poll()
    assert consumer.stored == {(IN, 0): 5} and delivery.waiting == {}
    assert len(producer) == 0


def test_a_failed_delivery_raises_and_stores_nothing_past_it() -> None:
    delivery, producer, consumer = _at_least_once()
    _batch(delivery, outputs=1, next_offset=2)
    delivery.poll()
    producer.fail_next()
    _batch(delivery, outputs=1, next_offset=5)
    _batch(delivery, outputs=1, next_offset=8)
    with pytest.raises(DeliveryError, match="Message timed out"):
        delivery.poll()
    assert consumer.stored == {(IN, 0): 2}


def test_after_a_failed_delivery_shutdown_commits_nothing_past_it() -> None:
    # The replica's shutdown (``finally: delivery.close()``) must not store the later
    # batches' offsets either, or the restarted replica would skip the lost output.
    delivery, producer, consumer = _at_least_once()
    _batch(delivery, outputs=1, next_offset=2)
    delivery.poll()
    producer.fail_next()
    _batch(delivery, outputs=1, next_offset=5)
    _batch(delivery, outputs=1, next_offset=8)
    with pytest.raises(DeliveryError):
        delivery.poll()
    delivery.close(0)
    assert consumer.stored == {(IN, 0): 2}
    assert consumer.broker.committed[GROUP] == {(IN, 0): 2}


def test_a_full_queue_makes_produce_wait_and_loses_nothing() -> None:
    delivery, producer, consumer = _at_least_once(queue_limit=2)
    _batch(delivery, outputs=5, next_offset=4)
    delivery.poll()
    written = [m.value() for m in producer.broker.records(OUT)]
    assert written == [f"o4.{i}".encode() for i in range(5)]
    assert consumer.stored == {(IN, 0): 4}


# -- at-least-once: revoke and shutdown -----------------------------------------


def test_revoke_flushes_then_commits_what_was_output() -> None:
    delivery, _, consumer = _at_least_once()
    _batch(delivery, outputs=2, next_offset=4)  # acknowledged only by a poll or flush
    assert consumer.stored == {}
    delivery.on_revoke([])
    assert consumer.broker.committed[GROUP] == {(IN, 0): 4}


def test_revoke_with_outputs_still_unacknowledged_commits_nothing() -> None:
    delivery, producer, consumer = _at_least_once()
    producer.hold()  # a flush that times out
    _batch(delivery, outputs=2, next_offset=4)
    delivery.on_revoke([])  # no offset to commit: not an error
    assert consumer.broker.committed.get(GROUP, {}) == {}


def test_close_flushes_and_commits_the_last_offsets() -> None:
    delivery, _, consumer = _at_least_once()
    _batch(delivery, outputs=3, next_offset=9)
    delivery.close(0)
    assert len(consumer.broker.records(OUT)) == 3
    assert consumer.broker.committed[GROUP] == {(IN, 0): 9}


def test_unbatched_outputs_store_no_offsets() -> None:
    delivery, _, consumer = _at_least_once()
    delivery.produce_unbatched(OUT, b"control", None, [])
    delivery.poll()
    assert [m.value() for m in consumer.broker.records(OUT)] == [b"control"]
    assert consumer.stored == {}


# -- exactly-once ---------------------------------------------------------------


def _exactly_once(records: int = 10) -> tuple[ExactlyOnce, MemoryProducer, MemoryBroker]:
    broker = MemoryBroker()
    consumer = _consuming(broker, records)
    producer = MemoryProducer(broker)
    delivery = ExactlyOnce(
        cast(Producer, producer), cast(Consumer, consumer), watchdog=CallWatchdog(exit=_Exits())
    )
    return delivery, producer, broker


def test_each_batch_is_one_transaction() -> None:
    delivery, producer, _ = _exactly_once()
    _batch(delivery, outputs=2, next_offset=3)
    _batch(delivery, outputs=0, next_offset=5)
    _batch(delivery, outputs=4, next_offset=9)
    assert producer.transactions == {"committed": 3, "aborted": 0}


def test_the_wait_after_a_commit_doubles_when_a_transaction_met_the_refusal() -> None:
    delivery, producer, _ = _exactly_once()
    now = [100.0]
    delivery.clock = lambda: now[0]
    flush = producer.flush
    acknowledged_in = [0.001]

    def flush_taking(timeout: float | None = None) -> int:
        now[0] += acknowledged_in[0]
        return flush(timeout)

    producer.flush = flush_taking  # type: ignore[method-assign]
    _batch(delivery, outputs=1, next_offset=1)
    first = delivery.not_before - now[0]
    assert 0 < first < 0.002  # a transaction acknowledged at once: the wait shrinks
    acknowledged_in[0] = 1.5 * delivery.RETRIED_S  # librdkafka retried after the refusal
    _batch(delivery, outputs=1, next_offset=2)
    assert delivery.not_before - now[0] == pytest.approx(2 * first)
    for offset in range(3, 12):  # refused again and again: never past settle_max_s
        _batch(delivery, outputs=1, next_offset=offset)
    assert delivery.not_before - now[0] == pytest.approx(delivery.settle_max_s)


def test_two_producers_take_turns_and_no_batch_waits_after_a_commit() -> None:
    broker = MemoryBroker()
    consumer = _consuming(broker, 10)
    first, second = MemoryProducer(broker), MemoryProducer(broker)
    delivery = ExactlyOnce(
        cast(Producer, first),
        cast(Consumer, consumer),
        watchdog=CallWatchdog(exit=_Exits()),
        spare=cast(Producer, second),
    )
    for offset in range(1, 7):
        _batch(delivery, outputs=1, next_offset=offset)
        # a transaction never begins on the producer whose own commit just returned
        assert delivery.not_before == 0.0
    assert first.transactions == second.transactions == {"committed": 3, "aborted": 0}
    assert [m.value() for m in broker.records(OUT)] == [f"o{i}.0".encode() for i in range(1, 7)]
    assert broker.committed[GROUP] == {(IN, 0): 6}  # the later transaction's offset wins


def test_a_transaction_shows_outputs_and_offsets_together_on_commit() -> None:
    delivery, producer, broker = _exactly_once()
    delivery.begin_batch()
    delivery.produce(OUT, b"o", None, [])
    producer.poll()  # acknowledged, but inside the transaction
    assert broker.records(OUT) == []
    delivery.end_batch({(IN, 0): 3})
    assert [m.value() for m in broker.records(OUT)] == [b"o"]
    assert broker.committed[GROUP] == {(IN, 0): 3}


@pytest.mark.parametrize("call", ["send_offsets_to_transaction", "commit_transaction"])
def test_a_failed_transaction_aborts_and_shows_nothing(call: str) -> None:
    delivery, producer, broker = _exactly_once()
    producer.fail_call(call, KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out")))
    with pytest.raises(TransactionAborted, match=f"aborted in {call}, .* retried: timed out"):
        _batch(delivery, outputs=2, next_offset=3)
    assert producer.transactions == {"committed": 0, "aborted": 1}
    assert not producer.open_transaction
    assert broker.records(OUT) == []
    assert GROUP not in broker.committed


def test_a_fatal_error_ends_the_replica() -> None:
    delivery, producer, broker = _exactly_once()
    fenced = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    producer.fail_call("commit_transaction", KafkaException(fenced))
    with pytest.raises(DeliveryError, match="transaction failed in commit_transaction: fenced"):
        _batch(delivery, outputs=2, next_offset=3)
    assert producer.transactions == {"committed": 0, "aborted": 1}
    assert broker.records(OUT) == []


def test_a_transaction_whose_abort_fails_too_ends_the_replica_at_once() -> None:
    """After a broker restart librdkafka's abort can time out for good: every later
    begin_transaction then conflicts with it. Retrying batch after batch took minutes (a
    clean-clone CI run); a fresh replica's producer fences this one in seconds."""
    delivery, producer, broker = _exactly_once()
    producer.fail_call("commit_transaction", _aborting())
    timed_out = KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish")
    producer.fail_call("abort_transaction", KafkaException(timed_out))
    with pytest.raises(
        DeliveryError,
        match="failed in commit_transaction: generation; its abort failed too "
        r"\(Timed out waiting for operation to finish\)",
    ):
        _batch(delivery, outputs=2, next_offset=3)
    assert broker.records(OUT) == []
    assert GROUP not in broker.committed


def test_a_lost_output_aborts_its_transaction_for_a_retry() -> None:
    delivery, producer, broker = _exactly_once()
    producer.fail_next()
    with pytest.raises(TransactionAborted):
        _batch(delivery, outputs=2, next_offset=3)
    assert producer.transactions["aborted"] == 1
    assert broker.records(OUT) == []
    assert GROUP not in broker.committed


def test_close_aborts_an_open_transaction() -> None:
    delivery, producer, broker = _exactly_once()
    delivery.begin_batch()
    delivery.produce(OUT, b"o", None, [])
    delivery.close(0)
    assert producer.transactions == {"committed": 0, "aborted": 1}
    assert broker.records(OUT) == []


# -- the call watchdog (issue 17: send_offsets_to_transaction blocked for minutes) ------


class _Exits:
    def __init__(self) -> None:
        self.codes: list[int] = []

    def __call__(self, code: int) -> None:
        self.codes.append(code)


def test_a_call_that_outlives_its_timeout_ends_the_replica() -> None:
    clock, exits = ManualClock(), _Exits()
    watchdog = CallWatchdog(grace_s=15, clock=clock, exit=exits)
    with watchdog.bounded("send_offsets_to_transaction", 30):
        clock.now = 44.0
        watchdog.check()
        assert exits.codes == []  # within its timeout and the grace
        clock.now = 46.0
        watchdog.check()
        assert exits.codes == [CallWatchdog.EXIT_STUCK]


def test_a_call_that_returned_is_not_watched() -> None:
    clock, exits = ManualClock(), _Exits()
    watchdog = CallWatchdog(grace_s=15, clock=clock, exit=exits)
    with watchdog.bounded("commit_transaction", 60):
        clock.now = 10.0
    clock.now = 1000.0
    watchdog.check()
    assert exits.codes == []


def test_every_transactional_call_is_watched() -> None:
    clock, exits = ManualClock(), _Exits()
    watched: list[str] = []
    watchdog = CallWatchdog(clock=clock, exit=exits)
    bounded = watchdog.bounded

    def recording(what: str, timeout_s: float) -> Any:
        watched.append(what)
        return bounded(what, timeout_s)

    watchdog.bounded = recording  # type: ignore[method-assign]
    broker = MemoryBroker()
    consumer = MemoryConsumer(broker)
    consumer.subscribe(["in"])
    delivery = ExactlyOnce(
        cast(Producer, MemoryProducer(broker)), cast(Consumer, consumer), watchdog=watchdog
    )
    delivery.begin_batch()
    delivery.end_batch({("in", 0): 1})
    delivery.begin_batch()
    delivery.close(0)
    assert watched == [
        "init_transactions",
        "send_offsets_to_transaction",
        "commit_transaction",
        "abort_transaction",
    ]


def test_a_replica_stuck_sending_offsets_ends_soon_after_its_transaction_timed_out() -> None:
    """librdkafka 2.16 can block in send_offsets_to_transaction for good after a broker
    restart (its timeout is not enforced); the broker aborts a transaction older than
    transaction.timeout.ms (10 s), so the replica ends at that plus the grace, not later."""
    clock, exits = ManualClock(), _Exits()
    broker = MemoryBroker()
    producer = MemoryProducer(broker)
    watchdog = CallWatchdog(grace_s=15, clock=clock, exit=exits)
    delivery = ExactlyOnce(
        cast(Producer, producer), cast(Consumer, _consuming(broker, 3)), watchdog=watchdog
    )
    seen: list[float] = []

    def blocked(positions: Any, metadata: Any, timeout: float) -> None:
        seen.append(timeout)
        clock.now = 24.0
        watchdog.check()  # what the watching thread does while the call hangs
        assert exits.codes == []
        clock.now = 26.0
        watchdog.check()

    producer.send_offsets_to_transaction = blocked  # type: ignore[method-assign]
    _batch(delivery, outputs=1, next_offset=3)
    assert seen == [10.0]
    assert exits.codes == [CallWatchdog.EXIT_STUCK]


def test_by_default_a_stuck_replica_ends_five_seconds_past_its_transaction_timeout() -> None:
    """The bound of exactly-once recovery after a broker or network fault: librdkafka
    enforces its timeouts to the millisecond when it works, so a grace of 5 s only
    waits for a call that is truly stuck; the replica then ends within
    transaction.timeout.ms (10 s) + 5 s + one poll of the watching thread."""
    clock, exits = ManualClock(), _Exits()
    watchdog = CallWatchdog(clock=clock, exit=exits)
    with watchdog.bounded("send_offsets_to_transaction", 10):
        clock.now = 14.9
        watchdog.check()
        assert exits.codes == []
        clock.now = 15.1
        watchdog.check()
        assert exits.codes == [CallWatchdog.EXIT_STUCK]


def test_a_retriable_timeout_calls_the_same_method_again_without_aborting() -> None:
    """librdkafka wants a timed-out transactional call repeated; an abort in between
    fails with a conflict, and every later transaction with it."""
    delivery, producer, broker = _exactly_once()
    timed_out = KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)
    producer.fail_call("commit_transaction", KafkaException(timed_out))
    _batch(delivery, outputs=2, next_offset=3)
    assert producer.transactions == {"committed": 1, "aborted": 0}
    assert len(broker.records(OUT)) == 2


def test_an_output_outside_a_batch_is_retried_after_an_abort() -> None:
    delivery, producer, broker = _exactly_once()
    producer.fail_call("commit_transaction", _aborting())
    delivery.produce_unbatched(OUT, b"status", None, [])  # a model status, say
    assert producer.transactions == {"committed": 1, "aborted": 1}
    assert [m.value() for m in broker.records(OUT)] == [b"status"]


def _aborting() -> KafkaException:
    return KafkaException(
        KafkaError(KafkaError.ILLEGAL_GENERATION, "generation", txn_requires_abort=True)
    )


@pytest.mark.parametrize(
    ("environ", "bound"),
    [({}, 10.0), ({"STREAMFLOW_KAFKA_TRANSACTION_TIMEOUT_MS": "30000"}, 30.0)],
    ids=["default", "the app's"],
)
def test_sending_offsets_is_bounded_by_the_apps_transaction_timeout(
    environ: dict[str, str], bound: float
) -> None:
    """An app that gives its transactions longer (a slow batch) must not have its replica
    ended by the watchdog while the broker would still take the transaction."""
    clients = KafkaClients(bootstrap="unused:9092", config=config_from_env(environ))
    broker = MemoryBroker()
    producer = MemoryProducer(broker)
    delivery = ExactlyOnce(
        cast(Producer, producer),
        cast(Consumer, _consuming(broker, 3)),
        watchdog=CallWatchdog(exit=_Exits()),
        transaction_timeout_s=clients.transaction_timeout_s,
    )
    seen: list[float] = []

    def sending(positions: Any, metadata: Any, timeout: float) -> None:
        seen.append(timeout)

    producer.send_offsets_to_transaction = sending  # type: ignore[method-assign]
    _batch(delivery, outputs=1, next_offset=3)
    assert seen == [bound]
