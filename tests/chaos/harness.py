"""The chaos harness: a paced stream of distinct ids, a fault, and a count of every record.

A scenario runs one application (`apps:Scale`, a passthrough that dead-letters
its poison records) on real replicas under the local supervisor. A producer
thread sends ``count`` distinct ids at a steady rate, a fault is injected while
they flow, and the run waits, by condition, until it is over: every id out or
dead-lettered, the group's committed offsets at the end of the input, and the
reader at the end of the outputs. Then every record is counted. (The producer,
the reader and the questions to Kafka are in `traffic`.)

What the table's columns mean:

* **in**: distinct ids the input producer had committed (it writes in transactions).
* **out**: distinct ids read from the output topic (``read_committed``).
* **duplicates**: output records beyond the first of their id.
* **dead letters**: distinct ids read from the dead-letter topic.
* **restarts**: replica restarts by the supervisor (``ReplicaProcess.restarts``,
  summed over every replica the run started, removed ones included).
* **recover**: seconds from the fault's end until the first id sent after it
  comes out: the pipeline takes new records again. (When every id was sent
  before the fault ended, as in a long partition: until the first output read
  after it.) Outputs of batches caught in flight by the fault do not count;
  ``n/a``: nothing came out after the fault's end, all was out by then.
* **caught up**: seconds from the fault's end until every id produced before
  it is out or dead-lettered: how long the backlog the fault made took to clear.
* **stuck ends by**: under exactly-once, the longest a replica can stay stuck in a
  transactional call before its watchdog ends it (``transaction.timeout.ms`` plus
  `CallWatchdog.GRACE_S` plus one poll); a fresh replica then starts after the
  supervisor's 1 s backoff. This is what bounds the exactly-once *recover* after a
  broker or network fault. ``n/a`` under at-least-once, which opens no transactions.
* **counts**: ``hold`` when the counts below hold, ``BROKEN`` when they do not
  or the run never settled (the test fails then too). "reader made again" says
  the yardstick's own consumer stalled after a broker restart and was made again
  where it stood (see `traffic.OutputReader`); "input producer made again" says
  the same of the input's producer (see `traffic.PacedProducer`): the app's counts are
  unaffected.

The fault's end is when the injected condition is over: the broker answers
again, the proxy is healed, the last `kill -9` was sent, the replicas that
stay own partitions again after a scaling.

The counts must satisfy: distinct ids in = distinct ids out + dead letters,
no id both out and dead, and (under exactly-once) no duplicates.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamflow.blueprint.model import Application
from streamflow.operator.local import ReplicaProcess
from streamflow.runtime import clients, delivery
from tests.chaos import traffic
from tests.chaos.traffic import OutputReader, PacedProducer, delete_topics
from tests.runtime import support

STREAMLET = "scale"
POISON_EVERY = 1000  # every 1000th id raises in the logic and is dead-lettered
# CI's size; the (50,000 at a few thousand a second) with STREAMFLOW_CHAOS_COUNT=50000
DEFAULT_COUNT = int(os.environ.get("STREAMFLOW_CHAOS_COUNT", "20000"))
DEFAULT_RATE = float(os.environ.get("STREAMFLOW_CHAOS_RATE", "4000"))  # ids a second
SETTLE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Row:
    """One scenario's result, for the table the session prints."""

    scenario: str
    guarantee: str
    records_in: int
    out: int
    duplicates: int
    dead_letters: int
    restarts: int
    recover_s: float | None
    caught_up_s: float | None
    took_s: float
    passed: bool
    reader_reopened: int = 0
    producer_remade: int = 0
    stuck_bound_s: float | None = None  # times the yardstick's own consumer stalled (OutputReader)


@dataclass
class Fault:
    """When the fault began and ended (monotonic), and how many ids were sent by its end."""

    started: float = 0.0
    ended: float = 0.0
    sent_by_end: int = 0


@dataclass
class ChaosRun:
    """One scenario: its app, replicas, producer and reader; see the module docstring."""

    scenario: str
    guarantee: str
    app: Application
    direct: str  # the broker's own address: the producer and the reader never suffer the fault
    running: support.Replicas
    table: list[Row]
    count: int = DEFAULT_COUNT
    rate: float = DEFAULT_RATE
    started: list[ReplicaProcess] = field(default_factory=list)
    fault: Fault = field(default_factory=Fault)
    producer: PacedProducer | None = None
    reader: OutputReader | None = None
    created: float = field(default_factory=time.monotonic)

    @property
    def in_topic(self) -> str:
        return support.topic(self.app, "in")

    @property
    def out_topic(self) -> str:
        return support.topic(self.app, "out")

    def start_replica(self, index: int) -> ReplicaProcess:
        replica = self.running.start(STREAMLET, index)
        self.started.append(replica)
        return replica

    def restarts(self) -> int:
        return sum(replica.restarts for replica in self.started)

    def start(self, replicas: int) -> None:
        """Start the replicas, wait until they have partitions, then start the stream."""
        for index in range(replicas):
            self.start_replica(index)
        self.wait_all_assigned()
        records = support.readings(
            self.count, poison={i for i in range(self.count) if i % POISON_EVERY == 999}
        )
        self.reader = OutputReader(self.direct, self.out_topic, self.app.dlq_topic(STREAMLET))
        self.reader.start()
        self.producer = PacedProducer(self.direct, self.in_topic, records, self.rate)
        self.producer.start()

    def wait_all_assigned(self) -> None:
        """Until every replica started has logged an assignment of input partitions."""

        def assigned() -> bool:
            lines = list(self.running.lines)
            return all(
                any(
                    line.startswith(f"{replica.name}| ") and f"assigned {self.in_topic}" in line
                    for line in lines
                )
                for replica in self.started
            )

        support.wait_for(
            assigned, timeout=120, message=f"every replica to own partitions\n{self.running.log()}"
        )

    def wait_mid_run(self) -> None:
        """Until a third of the ids are sent and outputs flow: the moment to strike."""
        producer, reader = self._parts()
        support.wait_for(
            lambda: producer.sent >= self.count // 3 and reader.distinct() > 0,
            timeout=120,
            message=f"outputs to flow\n{self.running.log()}",
        )

    @contextlib.contextmanager
    def injecting(self) -> Iterator[None]:
        """Marks the fault's start and end around the block that injects it."""
        producer, _ = self._parts()
        self.fault.started = time.monotonic()
        yield
        self.fault.ended = time.monotonic()
        self.fault.sent_by_end = producer.sent

    def finish(self) -> Row:
        """Wait until everything is out and settled, count, record the row, and assert."""
        producer, reader = self._parts()
        try:
            self._settle(producer, reader)
        except AssertionError:
            self.table.append(self._row(producer, reader, settled=False))
            raise
        finally:
            producer.stop()
            reader.stop()
        row = self._row(producer, reader)
        self.table.append(row)
        self._check(row, producer, reader)
        return row

    def _settle(self, producer: PacedProducer, reader: OutputReader) -> None:
        log = self.running.log
        support.wait_for(
            producer.done.is_set, timeout=SETTLE_TIMEOUT_S, message="the input to be acknowledged"
        )
        assert not producer.failed, f"the input producer lost records: {producer.failed[:5]}"
        try:
            support.wait_for(
                lambda: reader.distinct() >= len(producer.acked),
                timeout=SETTLE_TIMEOUT_S,
                message="every id out or dead-lettered",
            )
        except AssertionError as exc:
            lag = traffic.group_lag(
                self.direct, self.app.consumer_group(STREAMLET), self.in_topic, producer.ends
            )
            raise AssertionError(  # the counts as they are now, not when the wait began
                f"{exc} ({reader.distinct()} of {len(producer.acked)}); "
                f"the group's lag on the input: {lag}; "
                f"{traffic.where_outputs_stand(self.direct, reader)}\n{log()}"
            ) from None
        # Nothing can come out any more once the group has committed the whole input...
        group = self.app.consumer_group(STREAMLET)
        support.wait_for(
            lambda: traffic.group_lag(self.direct, group, self.in_topic, producer.ends) == 0,
            timeout=SETTLE_TIMEOUT_S,
            message=f"the group's committed offsets to reach the input's end\n{log()}",
        )
        # ...and what did come out has been read once the reader is at the outputs' end.
        high = traffic.high_watermarks(self.direct, reader.partitions)
        support.wait_for(
            lambda: reader.at_end(high),
            timeout=SETTLE_TIMEOUT_S,
            message=f"the reader to reach the outputs' end {high}, at {reader.end}\n{log()}",
        )

    def _row(self, producer: PacedProducer, reader: OutputReader, *, settled: bool = True) -> Row:
        with reader.lock:
            out, dead = dict(reader.out), dict(reader.dead)
            first_seen = dict(reader.first_seen)
        recover = caught_up = None
        if self.fault.ended:
            later = [first_seen.get(f"r{i}") for i in range(self.fault.sent_by_end, self.count)]
            if later:
                recover = min((t for t in later if t is not None), default=None)
            else:
                recover = reader.first_output_after(self.fault.ended)
            if recover is not None:
                recover = max(0.0, recover - self.fault.ended)
            before = [f"r{i}" for i in range(self.fault.sent_by_end)]
            if all(key in first_seen for key in before):
                last = max((first_seen[key] for key in before), default=self.fault.ended)
                caught_up = max(0.0, last - self.fault.ended)
        return Row(
            scenario=self.scenario,
            guarantee=self.guarantee,
            records_in=len(producer.acked),
            out=len(out),
            duplicates=sum(out.values()) - len(out) + sum(dead.values()) - len(dead),
            dead_letters=len(dead),
            restarts=self.restarts(),
            recover_s=recover,
            caught_up_s=caught_up,
            took_s=time.monotonic() - self.created,
            passed=settled and self._counts_hold(producer, out, dead),
            reader_reopened=len(reader.reopened),
            producer_remade=producer.remade,
            stuck_bound_s=stuck_bound_s(self.guarantee),
        )

    def _counts_hold(
        self, producer: PacedProducer, out: dict[str, int], dead: dict[str, int]
    ) -> bool:
        exact = self.guarantee == "exactly-once"
        no_duplicates = all(n == 1 for n in (*out.values(), *dead.values()))
        return (
            set(out) | set(dead) == producer.acked
            and not set(out) & set(dead)
            and len(producer.acked) == self.count
            and (no_duplicates or not exact)
        )

    def _check(self, row: Row, producer: PacedProducer, reader: OutputReader) -> None:
        with reader.lock:
            out, dead = set(reader.out), set(reader.dead)
            repeated = {k: n for k, n in (reader.out + reader.dead).items() if n > 1}
        log = self.running.log()
        assert row.records_in == self.count, f"{row.records_in} of {self.count} ids acknowledged"
        missing = producer.acked - out - dead
        assert not missing, (
            f"{len(missing)} ids neither out nor dead, e.g. {sorted(missing)[:5]}\n{log}"
        )
        assert not out & dead, f"ids both out and dead-lettered: {sorted(out & dead)[:5]}"
        assert not (out | dead) - producer.acked, "ids out that never went in"
        assert row.dead_letters == self.count // POISON_EVERY, f"dead letters: {sorted(dead)[:5]}"
        if self.guarantee == "exactly-once":
            assert not repeated, (
                f"{len(repeated)} ids read more than once under exactly-once, e.g. "
                f"{sorted(repeated.items())[:5]}\n{log}"
            )

    def _parts(self) -> tuple[PacedProducer, OutputReader]:
        assert self.producer is not None and self.reader is not None, "call start() first"
        return self.producer, self.reader


@contextlib.contextmanager
def chaos_run(
    *,
    scenario: str,
    guarantee: str,
    bootstrap: str,
    direct: str,
    tmp_path: Path,
    table: list[Row],
    replicas: int = 2,
    count: int = DEFAULT_COUNT,
    rate: float = DEFAULT_RATE,
    streamlet: dict[str, Any] | None = None,
) -> Iterator[ChaosRun]:
    """A scenario's app on fresh topics, its replicas bootstrapped at ``bootstrap``
    (the broker, or a proxy in front of it), and everything stopped afterwards.
    ``streamlet`` adds to (or replaces parts of) the streamlet's spec; see `make_app`."""
    app = make_app(bootstrap, guarantee=guarantee, replicas=replicas, streamlet=streamlet)
    with support.replicas(app, tmp_path) as running:
        run = ChaosRun(
            scenario=scenario,
            guarantee=guarantee,
            app=app,
            direct=direct,
            running=running,
            table=table,
            count=count,
            rate=rate,
        )
        try:
            yield run
        finally:
            if run.producer is not None:
                run.producer.stop()
            if run.reader is not None and run.reader.is_alive():
                run.reader.stop()
            # every replica's whole log, for a diagnosis after the fact (pytest keeps tmp_path)
            (tmp_path / "replicas.log").write_text("\n".join(running.lines) + "\n")
    delete_topics(direct, [*app.topics, app.dlq_topic(STREAMLET)])


def make_app(
    bootstrap: str,
    *,
    guarantee: str,
    replicas: int = 2,
    streamlet: dict[str, Any] | None = None,
) -> Application:
    """The scenarios' app, on fresh topics of 4 partitions: ``in`` -> ``scale`` -> ``out``.

    ``scale`` is `apps:Scale` unless ``streamlet`` says otherwise (its keys win: a
    class, a config, a ``stall_after``); whatever it is, it reads and writes readings
    keyed by their ids, and dead-letters the poison ones.
    """
    spec = {"class": "apps:Scale", "replicas": replicas, "guarantee": guarantee}
    return support.make_app(
        bootstrap,
        streamlets={STREAMLET: {**spec, **(streamlet or {})}},
        topics={
            "in": {"consumers": [f"{STREAMLET}.in"], "partitions": 4},
            "out": {"producers": [f"{STREAMLET}.out"], "partitions": 4},
        },
    )


def stuck_bound_s(guarantee: str) -> float | None:
    """How long a replica can stay stuck in a transactional call before it ends."""
    if guarantee != "exactly-once":
        return None
    watchdog = delivery.CallWatchdog
    return clients.TRANSACTION_TIMEOUT_MS / 1000 + watchdog.GRACE_S + watchdog.POLL_S


TABLE_TITLE = (
    "Chaos suite: each scenario sends distinct ids through a real app while a fault is on, "
    "then counts them (tests/chaos/harness.py says what each column means)."
)


def format_table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    header = (
        "| scenario | guarantee | in | out | duplicates | dead letters | restarts "
        "| recover (s) | caught up (s) | stuck ends by (s) | took (s) | counts |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    lines = [
        f"| {r.scenario} | {r.guarantee} | {r.records_in} | {r.out} | {r.duplicates} "
        f"| {r.dead_letters} | {r.restarts} | {_seconds(r.recover_s)} | {_seconds(r.caught_up_s)} "
        f"| {_seconds(r.stuck_bound_s)} | {r.took_s:.0f} | {_verdict(r)} |"
        for r in rows
    ]
    return header + "\n".join(lines) + "\n"


def _verdict(row: Row) -> str:
    verdict = "hold" if row.passed else "BROKEN"
    if row.reader_reopened:
        verdict += f" (reader made again {row.reader_reopened}x)"
    if row.producer_remade:
        verdict += f" (input producer made again {row.producer_remade}x)"
    return verdict


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"
