"""The scoring loop over Kafka in memory, with the runtime's own processor as the application.

The application is ``memory_support``'s ``Copy``: the real ``Processor`` (its
lineage headers, its dead letters), turned by the scorer's ``tick`` so that
nothing runs on a thread and nothing sleeps. What a user relies on is pinned
here one behaviour at a time: every row is accounted for, results come back in
row order whatever else shares the topics, the feed never runs ahead of
``max_in_flight``, an interrupted run resumes, and a stuck application is
reported instead of waited on for ever.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streamflow.api.streamlet import Record
from streamflow.runtime import lineage
from streamflow.runtime.inmemory import MemoryConsumer, MemoryProducer
from streamflow.schema.codecs import DecodeError
from streamflow.score import engine
from streamflow.score.inputs import InputBatch, InputRow, batched
from tests.runtime import memory_support
from tests.runtime.memory_support import DLQ, IN, OUT, Copy, JsonCodec


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _rows(n: int, *, poison: tuple[int, ...] = (), invalid: tuple[int, ...] = ()) -> list[InputRow]:
    rows = []
    for i in range(n):
        doc = {"id": f"r{i}", "seq": i, "value": float(i), "poison": i in poison}
        if i in invalid:
            rows.append(InputRow(i, None, {"id": f"r{i}"}, "missing field seq"))
        else:
            rows.append(InputRow(i, doc, doc))
    return rows


def _fed(rows: list[InputRow]) -> list[InputBatch]:
    """The rows in batches of 7: a batch ends between the rows the tests look at."""
    return list(batched(rows, 7))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.01  # each look at the clock is 10 ms later: no real time passes
        return self.now


def _scorer(rig: memory_support.Rig, *, run: str = "run-1", **options: Any) -> engine.Scorer:
    failures = engine.FailedRows()
    producer = MemoryProducer(rig.broker, config=failures.producer_config())
    return engine.Scorer(
        producer=cast(Producer, producer),
        failures=failures,
        consumer=cast(Consumer, MemoryConsumer(rig.broker, group="scorer")),
        input_topic=IN,
        input_codec=JsonCodec("tests.runtime.Reading"),
        input_schema="tests.runtime.Reading",
        output_topic=OUT,
        output_codec=JsonCodec("tests.runtime.Scaled"),
        dead_letter_topics={"copy": DLQ},
        run_id=run,
        clock=_Clock(),
        **options,
    )


def _state(scorer: engine.Scorer, total: int, run: str = "run-1") -> engine.RunState:
    offsets = engine.end_offsets(scorer.consumer, [OUT, DLQ])
    return engine.RunState(run=run, input={}, total=total, offsets=offsets)


def test_every_row_comes_back_as_a_result_or_a_dead_letter(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    scorer = _scorer(rig)
    rows = _rows(40, poison=(3, 17), invalid=(8,))
    outcome = scorer.run(_fed(rows), _state(scorer, 40), tick=rig.processor.turn)
    assert sorted(outcome.results) == [i for i in range(40) if i not in (3, 8, 17)]
    assert outcome.results[5] == {"id": "r5"}
    assert {row: (d.stage, d.error_type) for row, d in outcome.dead.items()} == {
        3: ("copy", "ValueError"),
        8: ("input", "InvalidRow"),
        17: ("copy", "ValueError"),
    }
    assert len(outcome.results) + len(outcome.dead) == 40  # nothing lost
    assert len(rig.broker.records(IN)) == 39  # the refused row was never sent


def test_live_traffic_and_an_earlier_run_on_the_same_topics_are_not_collected(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    earlier = [(lineage.RUN, b"run-0"), (lineage.ROW, b"1")]
    rig.broker.append(OUT, json.dumps({"id": "stale"}).encode(), None, earlier)
    scorer = _scorer(rig)
    state = _state(scorer, 10)
    rig.broker.append(OUT, json.dumps({"id": "other"}).encode(), None, earlier)
    rig.write(*({"id": f"live{i}", "seq": i, "value": 0.0} for i in range(25)))
    outcome = scorer.run(_fed(_rows(10)), state, tick=rig.processor.turn)
    assert [v["id"] for _, v in sorted(outcome.results.items())] == [f"r{i}" for i in range(10)]
    assert outcome.extra_results == 0


def test_lineage_headers_reach_outputs_and_dead_letters(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop)
    scorer = _scorer(rig, run="r-42")
    scorer.run(_fed(_rows(3, poison=(1,))), _state(scorer, 3, "r-42"), tick=rig.processor.turn)
    out = [dict(cast(list[tuple[str, bytes]], m.headers())) for m in rig.broker.records(OUT)]
    assert [(h[lineage.RUN], h[lineage.ROW]) for h in out] == [(b"r-42", b"0"), (b"r-42", b"2")]
    dead = memory_support.headers_of(rig.broker.records(DLQ)[0])
    assert (dead[lineage.RUN], dead[lineage.ROW]) == (b"r-42", b"1")


class _CopyTwice(Copy):
    """Two outputs a record: the general output path, not the one-dict fast path."""

    def process(self, record: Record) -> list[dict[str, Any]]:
        return [super().process(record)] * 2


@pytest.mark.parametrize("streamlet", [Copy, _CopyTwice])
def test_a_streamlet_with_lineage_off_writes_no_lineage_and_its_dead_letters_keep_it(
    loop: asyncio.AbstractEventLoop, streamlet: type[Copy]
) -> None:
    rig = memory_support.rig(streamlet(), loop, lineage=False)
    rig.broker.append(
        IN,
        json.dumps({"id": "a", "seq": 1, "value": 1.0}).encode(),
        None,
        [(lineage.RUN, b"r-7"), (lineage.ROW, b"0")],
    )
    rig.broker.append(
        IN,
        json.dumps({"id": "b", "seq": 2, "value": 2.0, "poison": True}).encode(),
        None,
        [(lineage.RUN, b"r-7"), (lineage.ROW, b"1")],
    )
    rig.processor.turn()
    rig.delivery.poll()
    outs = rig.broker.records(OUT)
    assert len(outs) == (1 if streamlet is Copy else 2)
    assert all([name for name, _ in out.headers() or []] == ["streamflow-schema"] for out in outs)
    dead = memory_support.headers_of(rig.broker.records(DLQ)[0])
    assert (dead[lineage.RUN], dead[lineage.ROW]) == (b"r-7", b"1")  # the record as it came


def test_records_without_lineage_get_no_extra_headers(loop: asyncio.AbstractEventLoop) -> None:
    rig = memory_support.rig(Copy(), loop)
    rig.write({"id": "a", "seq": 1, "value": 1.0})
    rig.processor.turn()
    rig.delivery.poll()
    assert [name for name, _ in rig.broker.records(OUT)[0].headers() or []] == ["streamflow-schema"]


def test_the_feed_never_runs_more_than_max_in_flight_ahead(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop, batch_size=3)
    scorer = _scorer(rig, max_in_flight=7)
    seen: list[int] = []

    def app_turn() -> None:
        sent = len(rig.broker.records(IN))
        done = len(rig.broker.records(OUT)) + len(rig.broker.records(DLQ))
        seen.append(sent - done)
        rig.processor.turn()

    outcome = scorer.run(_fed(_rows(50)), _state(scorer, 50), tick=app_turn)
    assert len(outcome.results) == 50
    assert max(seen) <= 7
    assert max(seen) == 7  # and it does fill the window


def test_an_interrupted_run_resumes_and_sends_only_what_kafka_did_not_have(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    rig = memory_support.rig(Copy(), loop, batch_size=4)
    path = tmp_path / "state.json"
    first = _scorer(rig, max_in_flight=8)
    state = _state(first, 30)
    turns = 0

    def interrupted() -> None:
        nonlocal turns
        turns += 1
        if turns == 6:
            raise KeyboardInterrupt
        rig.processor.turn()

    # row 2 is refused by the encoder (an unknown field), as a null in a Parquet column is
    rows = _rows(30)
    bad = {"id": "r2", "seq": 2, "value": 2.0, "bogus": 1}
    rows[2] = InputRow(2, bad, bad, checked=False)
    with pytest.raises(KeyboardInterrupt):
        first.run(_fed(rows), state, state_path=path, tick=interrupted)
    saved = engine.RunState.load(path)  # saved on the way out
    acknowledged = saved.acknowledged
    assert 0 < acknowledged < 30
    sent_before = len(rig.broker.records(IN))

    second = _scorer(rig, max_in_flight=8)
    outcome = second.run(_fed(rows), saved, state_path=path, tick=rig.processor.turn)
    assert sorted(outcome.results) == [r for r in range(30) if r != 2]
    assert outcome.dead[2].stage == "input"  # refused again, not waited for
    resent = len(rig.broker.records(IN)) - sent_before
    assert resent == 30 - acknowledged  # the acknowledged rows were not sent again
    # what went out after the last save came again, and was kept once (row 2 never went)
    assert outcome.extra_results == sent_before - (acknowledged - 1)


def test_an_application_that_returns_nothing_is_reported_not_waited_on(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    scorer = _scorer(rig, stall_timeout_s=5.0)
    with pytest.raises(engine.ScoreStalled, match=r"5 of 5 rows went into 'in'.*--run-id"):
        scorer.run(_fed(_rows(5)), _state(scorer, 5), tick=lambda: None)  # no replica running


def test_a_row_kafka_refuses_stops_the_run_with_its_number(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    scorer = _scorer(rig)
    cast(MemoryProducer, scorer.producer).fail_next(reason="Broker: Message size too large")
    with pytest.raises(engine.ScoreError, match=r"row 0: .*Message size too large"):
        scorer.run(_fed(_rows(3)), _state(scorer, 3), tick=rig.processor.turn)


def test_an_unchecked_row_the_encoder_refuses_is_coerced_or_refused_with_the_reason(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    converted: list[Any] = []

    def convert(doc: Any) -> dict[str, Any]:
        converted.append(doc)
        if doc.get("seq") == "two":
            raise DecodeError("seq: expected a long, got 'two'")
        return {k: v for k, v in doc.items() if k != "bogus"}

    scorer = _scorer(rig, convert=convert)
    fine = {"id": "r0", "seq": 0, "value": 0.0}
    fixable = {"id": "r1", "seq": 1, "value": 1.0, "bogus": 1}  # the codec refuses unknown fields
    broken = {"id": "r2", "seq": "two", "value": 2.0, "bogus": 1}
    rows = [InputRow(i, doc, doc, checked=False) for i, doc in enumerate((fine, fixable, broken))]
    outcome = scorer.run(_fed(rows), _state(scorer, 3), tick=rig.processor.turn)
    assert converted == [fixable, broken]  # the row the encoder took was not converted
    assert sorted(outcome.results) == [0, 1]
    assert outcome.dead[2].stage == "input" and "expected a long" in outcome.dead[2].error


class _NotLeaderYet(MemoryConsumer):
    """A topic made moments ago: its first answers are "not leader for partition"."""

    def __init__(self, broker: Any, *, refusals: int, code: int) -> None:
        super().__init__(broker, group="scorer")
        self.refusals = refusals
        self.code = code
        self.asked = 0

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        self.asked += 1
        if self.refusals:
            self.refusals -= 1
            raise KafkaException(KafkaError(self.code, "Broker: Not leader for partition"))
        return super().get_watermark_offsets(partition, timeout, cached)


def test_where_a_new_run_starts_is_asked_again_while_a_fresh_topic_has_no_leader(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # `score --start` makes the topics and asks where they end at once: a clean-clone
    # CI run failed on the broker's first "not leader for partition"
    rig = memory_support.rig(Copy(), loop)
    consumer = _NotLeaderYet(rig.broker, refusals=2, code=KafkaError.NOT_LEADER_FOR_PARTITION)
    offsets = engine.end_offsets(cast(Consumer, consumer), [OUT, DLQ])
    assert offsets[OUT] == {str(p): 0 for p in range(len(rig.broker.topics[OUT].partitions))}
    assert consumer.refusals == 0


def test_an_error_that_will_not_pass_is_not_asked_again(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = memory_support.rig(Copy(), loop)
    consumer = _NotLeaderYet(rig.broker, refusals=5, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        engine.end_offsets(cast(Consumer, consumer), [OUT, DLQ])
    assert consumer.asked == 1
