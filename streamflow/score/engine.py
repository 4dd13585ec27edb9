"""Feeding a data set through an application and collecting exactly its results.

One loop does both. It writes each row to the input topic with the run's id and
the row's number in headers (:mod:`streamflow.runtime.lineage`); every replica
copies them onto what it makes of the row, and a dead letter keeps them. So the
loop, reading the output topic and the dead-letter topics from where they ended
when the run began, can tell its own results from live traffic sharing the
application, and stop when every row is accounted for: an output, a dead letter,
or a row the input schema refused. It counts; it never stops on a timer. Only
when nothing has moved for ``stall_timeout_s`` does it give up, saying how many
rows are still out and where they may be stuck.

At most ``max_in_flight`` rows are sent and not yet accounted for, so a slow
model or a stopped replica holds the feed back instead of filling the topic.

A run can be resumed. Its :class:`RunState` (the run id, the offsets the
collection started from, and how many rows in file order Kafka acknowledged) is
saved as it goes; a new run with the same state reads the results again from
those offsets, sends only the rows after the acknowledged ones, and keeps the
first result of a row it sees twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from streamflow.runtime import lineage
from streamflow.runtime.clients import watermarks
from streamflow.schema.codecs import Codec, DecodeError
from streamflow.schema.columns import ColumnCodec
from streamflow.score.feed import Encoded, Feed
from streamflow.score.inputs import InputBatch
from streamflow.score.outcome import (
    DeadRow,
    FailedRows,
    Outcome,
    Progress,
    RunState,
    ScoreError,
    ScoreStalled,
    text,
)

__all__ = [
    "DeadRow",
    "FailedRows",
    "Outcome",
    "Progress",
    "RunState",
    "ScoreError",
    "ScoreStalled",
    "Scorer",
    "end_offsets",
]

_ERROR, _ERROR_TYPE = "streamflow-error", "streamflow-error-type"
_SAVE_EVERY_S = 1.0
_COLLECT_BATCH = 1000
_SEND_BETWEEN_TURNS = 1000
_SAVE_FLUSH_S = 10.0


class Scorer:
    """One run: feed ``rows`` into ``input_topic``, collect from the output and dead letters."""

    def __init__(
        self,
        *,
        producer: Producer,
        failures: FailedRows,
        consumer: Consumer,
        input_topic: str,
        input_codec: Codec,
        input_schema: str,
        output_topic: str,
        output_codec: Codec,
        dead_letter_topics: dict[str, str],
        run_id: str,
        max_in_flight: int = 10_000,
        stall_timeout_s: float = 300.0,
        convert: Callable[[Any], dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``convert`` checks and coerces a row the encoder refused (see ``InputRow.checked``)."""
        self.producer, self.failures, self.consumer = producer, failures, consumer
        self.input_topic, self.feed = input_topic, Feed(input_codec, convert)
        self.output_topic, self.output_codec = output_topic, output_codec
        self.output_columns = ColumnCodec.for_codec(output_codec)
        self.stage_of = {topic: streamlet for streamlet, topic in dead_letter_topics.items()}
        self.run_id, self._run_bytes = run_id, run_id.encode()
        self.max_in_flight = max(1, max_in_flight)
        self.stall_timeout_s = stall_timeout_s
        self.clock = clock
        self._schema_header = input_schema.encode()
        self.outcome = Outcome()
        self._accounted: set[int] = set()  # rows with a result or a dead letter
        self._passed = 0  # rows 0.._passed-1 were produced or refused, in file order

    # -- the run -------------------------------------------------------------------

    def run(
        self,
        batches: Iterable[InputBatch],
        state: RunState,
        *,
        state_path: Path | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        tick: Callable[[], None] | None = None,
    ) -> Outcome:
        """Until every row is accounted for; ``state`` says where to start (and is updated)."""
        started = last_save = last_move = self.clock()
        progress = Progress(total=state.total)
        self._passed = resumed = state.acknowledged
        self.consumer.assign(
            [
                TopicPartition(topic, int(p), offset)
                for topic, partitions in state.offsets.items()
                for p, offset in partitions.items()
            ]
        )
        batch_iter = iter(batches)
        reading, read = True, 0
        pending, at = Encoded([], []), 0  # the encoded batch being sent, and how far

        def turn(wait: float) -> None:
            nonlocal last_save, last_move
            if tick is not None:
                tick()
            self.producer.poll(0)
            if self.failures.first:
                raise ScoreError(self.failures.first)
            before = len(self._accounted)
            self._collect(wait)
            now = self.clock()
            progress.results, progress.dead = len(self.outcome.results), self._dead_count()
            progress.elapsed_s = now - started
            if len(self._accounted) != before or not progress.in_flight:
                last_move = now
            elif now - last_move > self.stall_timeout_s:
                raise ScoreStalled(self._stalled_message(progress))
            if now - last_save >= _SAVE_EVERY_S:
                last_save = now
                self._save(state, state_path)
                if on_progress is not None:
                    on_progress(progress)

        try:
            while reading or progress.accounted < progress.total:
                if reading and progress.in_flight < self.max_in_flight:
                    if at == len(pending.values):
                        batch = next(batch_iter, None)
                        if batch is None:
                            reading = False
                            progress.total = read  # what the file holds now, whatever was counted
                            self.producer.flush(30)
                            continue
                        read += len(batch)
                        pending, at = self.feed.encode(batch), 0
                        for row, doc, problem in pending.refused:
                            self._reject(row, doc, problem)
                    room = min(self.max_in_flight - progress.in_flight, _SEND_BETWEEN_TURNS)
                    end = min(len(pending.values), at + room)
                    numbers, values = pending.rows, pending.values
                    for i in range(at, end):
                        data, row = values[i], numbers[i]
                        if data is None:
                            progress.rejected += 1
                        else:
                            if row >= resumed:  # before: on the topic from the run resumed
                                self._produce(row, data)
                            progress.sent += 1
                    if end > at:
                        self._passed = max(self._passed, numbers[end - 1] + 1)
                    at = end
                    turn(0)
                    continue
                turn(0.2)
        finally:
            self._save(state, state_path)  # interrupted too: a resume starts from here
        if on_progress is not None:
            progress.elapsed_s = self.clock() - started
            on_progress(progress)
        return self.outcome

    # -- feeding -------------------------------------------------------------------

    def _produce(self, row: int, data: bytes) -> None:
        headers: list[tuple[str, str | bytes | None]] = [
            ("streamflow-schema", self._schema_header),
            (lineage.RUN, self._run_bytes),
            (lineage.ROW, str(row).encode()),
        ]
        while True:
            try:
                self.producer.produce(self.input_topic, data, None, headers=headers)
                return
            except BufferError:  # librdkafka's queue is full: let it drain
                self.producer.poll(0.05)

    def _reject(self, row: int, doc: Any, problem: str) -> None:
        self.outcome.dead[row] = DeadRow(row, "input", problem, "InvalidRow", doc=doc)

    # -- collecting ----------------------------------------------------------------

    def _collect(self, wait: float) -> None:
        rows: list[int] = []
        values: list[bytes] = []
        run, run_name, row_name = self._run_bytes, lineage.RUN, lineage.ROW  # a call a result
        output_topic, stage_of = self.output_topic, self.stage_of
        for msg in self._arrived(wait):
            listed = cast(list[tuple[str, Any]] | None, msg.headers())
            if not listed or msg.error() is not None:
                continue
            headers = dict(listed)  # a name given twice counts as its last value
            if headers.get(run_name) != run:
                continue
            try:
                row = int(headers[row_name])
            except (KeyError, TypeError, ValueError):
                continue
            if row < 0:
                continue
            topic = msg.topic()
            if topic == output_topic:
                rows.append(row)
                values.append(msg.value() or b"")
            elif topic in stage_of:
                self._dead_letter(row, stage_of[topic], headers)
        if rows:
            self._results(rows, values)

    def _arrived(self, wait: float) -> list[Message]:
        """What has arrived; if nothing, the first to arrive within ``wait`` and what came
        with it (a batch consume waits until the batch is full: results that trickle in
        would each wait for it)."""
        messages = self.consumer.consume(_COLLECT_BATCH, 0)
        if messages or wait <= 0:
            return messages
        messages = self.consumer.consume(1, wait)
        if messages:
            messages.extend(self.consumer.consume(_COLLECT_BATCH, 0))
        return messages

    def _results(self, rows: list[int], values: list[bytes]) -> None:
        """Keep the first result of each row that decodes: a batch of columns where the
        output's codec has a column form, else one by one. A copy that does not decode
        is a dead letter of the collection, kept unless a copy that decodes comes too."""
        results = self.outcome.results
        fresh = [i for i, row in enumerate(rows) if row not in results]
        self.outcome.extra_results += len(rows) - len(fresh)
        if self.output_columns is not None:
            columns = self.output_columns.decode([values[i] for i in fresh])
            for place, why in columns.errors:
                self._undecodable(rows[fresh[place]], why)
            kept, places = self._first_of_each([rows[fresh[p]] for p in columns.rows.tolist()])
            results.add_columns(kept, columns if len(kept) == columns.n else columns.take(places))
            self._accounted.update(kept)
            return
        for i in fresh:
            try:
                value = self.output_codec.decode(values[i])
            except DecodeError as exc:
                self._undecodable(rows[i], str(exc))
                continue
            if rows[i] in results:
                self.outcome.extra_results += 1
                continue
            results.add(rows[i], value)
            self._accounted.add(rows[i])

    def _first_of_each(self, decoded: list[int]) -> tuple[list[int], list[int]]:
        """(each row's first in ``decoded``, and its place there); the copies are extra."""
        seen: set[int] = set()
        places: list[int] = []
        for place, row in enumerate(decoded):
            if row in seen:
                self.outcome.extra_results += 1
            else:
                seen.add(row)
                places.append(place)
        return [decoded[p] for p in places], places

    def _undecodable(self, row: int, why: str) -> None:
        self._dead_letter(row, "collect", {_ERROR: why.encode(), _ERROR_TYPE: b"DecodeError"})

    def _dead_letter(self, row: int, stage: str, headers: dict[str, Any]) -> None:
        if row not in self.outcome.dead:
            self.outcome.dead[row] = DeadRow(
                row, stage, text(headers.get(_ERROR)), text(headers.get(_ERROR_TYPE))
            )
        self._accounted.add(row)

    def _dead_count(self) -> int:
        """Dead letters that came back from the application (refused rows are counted apart)."""
        return sum(
            1
            for row, dead in self.outcome.dead.items()
            if dead.stage != "input" and row not in self.outcome.results
        )

    # -- bookkeeping ---------------------------------------------------------------

    def _save(self, state: RunState, path: Path | None) -> None:
        """Record how far Kafka has the rows: once a flush leaves nothing in flight, every
        row passed so far is on the topic (a failure is never counted: it ends the run)."""
        passed = self._passed
        if self.producer.flush(_SAVE_FLUSH_S) == 0 and not self.failures.first:
            state.acknowledged = max(state.acknowledged, passed)
        if path is not None:
            state.save(path)

    def _stalled_message(self, progress: Progress) -> str:
        return (
            f"{progress.in_flight} of {progress.total} rows went into {self.input_topic!r} and "
            f"nothing has come back for {self.stall_timeout_s:.0f}s "
            f"({progress.results} results, {progress.dead} dead letters so far). Is the "
            "application running, with a model loaded? `streamflow status` shows its "
            "replicas; run again with the same --run-id to resume"
        )


def end_offsets(
    consumer: Consumer, topics: list[str], timeout: float = 30.0
) -> dict[str, dict[str, int]]:
    """Where each of ``topics`` ends now: where a new run starts collecting.

    The first topic (the output) must exist; a dead-letter topic that does not
    exist yet holds nothing of the run's, and is left out.
    """
    offsets: dict[str, dict[str, int]] = {}
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None:
            continue
        offsets[topic] = {
            str(p): watermarks(consumer, TopicPartition(topic, p), timeout_s=timeout)[1]
            for p in meta.partitions
        }
    if topics[0] not in offsets:
        raise ScoreError(f"the output topic {topics[0]!r} does not exist")
    return offsets
