"""Passthrough throughput: a streamflow processor against a hand-written loop.

``python -m bench.passthrough [--records N] [--size 100 1000] [--rounds R] [--bootstrap ...]
[--formats avro avro-registry json] [--registry URL] [--guarantees at-least-once exactly-once]``

Why it is built this way:

* One broker for everything, started here (devkit) unless one is given, so both
  competitors see the same broker, disk and page cache.
* Each size's input topic is filled once, and every run reads all of it from the
  earliest offset with a fresh consumer group into a fresh output topic.
* Every competitor is a separate process, as it is when deployed.
* The clock starts when the child has its first batch in hand, as the child reports
  it, so interpreter start-up and the group join are not counted. It stops when the
  sum of the output topic's end offsets reaches N, which the driver sees by asking the
  broker every 10 ms (one ListOffsets request), so only acknowledged outputs count.
* CPU is the child's own user + system time (all threads) over that same window: its
  own figure at the first batch, /proc at completion. Start-up and shutdown CPU are
  reported separately as ``cpu_total`` (``RUSAGE_CHILDREN`` around the whole run).
* Before each run the page cache is synced, so the previous run's writeback does not
  land in this one; the broker's disk is shared, its dirty pages need not be.
* Competitors are interleaved round by round, with the order reversed on every other
  round (A B C, C B A, ...), so drift of a busy machine hits all of them alike.
* Each topic format (``--formats``) has its own input topic, written in that format,
  and its runs are interleaved with the others' in the same rounds. streamflow and
  the hand-written loop run in every format, each against the loop in the same
  format; the peers only in single-object Avro. What a format costs is streamflow in
  that format over streamflow in ``avro``, paired by round (``format_costs``). The
  registry formats need a schema registry: ``--registry``,
  ``$STREAMFLOW_SCHEMA_REGISTRY_URL``, else the devkit's, started for the run.
* Each delivery guarantee (``--guarantees``) is interleaved the same way: streamflow
  with that guarantee in its spec, the hand-written loop with ``--guarantee`` (for
  exactly-once, full batches share a transaction for up to 100 ms in both), each
  compared with the loop under the same guarantee. The peers run at-least-once only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common, report, sfapp
from bench.child import Child
from bench.report import BASELINE

_WATCH_INTERVAL_S = 0.01
GUARANTEES = (sfapp.AT_LEAST_ONCE, sfapp.EXACTLY_ONCE)


@dataclass(frozen=True)
class Run:
    """Everything one competitor needs for one measured run."""

    bootstrap: str
    input_topic: str
    output_topic: str
    group: str
    records: int
    batch_size: int
    workdir: Path
    format: str = common.AVRO
    registry: str | None = None
    guarantee: str = sfapp.AT_LEAST_ONCE


@dataclass(frozen=True)
class Competitor:
    """A named way to run the passthrough; ``command`` gives the child's argv after python."""

    name: str
    description: str
    command: Callable[[Run], list[str]]
    python: str = sys.executable  # the peers run from the bench virtualenv
    formats: tuple[str, ...] = common.FORMATS  # the topic formats it can run in
    guarantees: tuple[str, ...] = GUARANTEES  # the delivery guarantees it can run under


def _streamflow(class_name: str, *, lineage: bool = False) -> Callable[[Run], list[str]]:
    def command(run: Run) -> list[str]:
        spec = sfapp.write_spec(
            run.workdir,
            name=run.group,
            input_topic=run.input_topic,
            output_topic=run.output_topic,
            class_name=class_name,
            topic_format=run.format,
            registry=run.registry,
            guarantee=run.guarantee,
            lineage=lineage,
        )
        return sfapp.command(
            spec, bootstrap=run.bootstrap, records=run.records, batch_size=run.batch_size
        )

    return command


def _plain(
    module: str, *, formats: bool = False, guarantees: bool = False, extra: tuple[str, ...] = ()
) -> Callable[[Run], list[str]]:
    """The command line of a child that takes the topics and group (format, guarantee) directly."""

    def command(run: Run) -> list[str]:
        registry = ["--registry", run.registry] if run.registry else []
        return [
            *("-m", module, "--bootstrap", run.bootstrap),
            *("--input", run.input_topic, "--output", run.output_topic, "--group", run.group),
            *("--records", str(run.records), "--batch-size", str(run.batch_size)),
            *(["--format", run.format, *registry] if formats else []),
            *(["--guarantee", run.guarantee] if guarantees else []),
            *extra,
        ]

    return command


COMPETITORS = {
    c.name: c
    for c in (
        Competitor(
            "sf-batch",
            "streamflow streamlet run, process_batch passthrough (lineage: false, so like the "
            "hand-written loop it copies no lineage headers)",
            _streamflow("PassBatch"),
        ),
        Competitor(
            "sf-lineage",
            "streamflow streamlet run, process_batch passthrough, copying lineage headers "
            "(the blueprint's default)",
            _streamflow("PassBatch", lineage=True),
            formats=(common.AVRO,),
        ),
        Competitor(
            "sf-record", "streamflow streamlet run, process passthrough", _streamflow("PassRecord")
        ),
        Competitor(
            "sf-columns",
            "streamflow streamlet run, process_columns passthrough (the native codec; lineage: "
            "false)",
            _streamflow("PassColumns"),
        ),
        Competitor(
            BASELINE,
            "hand-written confluent-kafka + fastavro loop (json: the json module + fastavro's "
            "validation)",
            _plain("bench.handwritten", formats=True, guarantees=True),
        ),
        Competitor(
            "bytes",
            "the hand-written loop forwarding each value's bytes, neither decoded nor encoded: "
            "librdkafka's own consume-and-produce with a Python call a record, the limit here",
            _plain("bench.handwritten", formats=True, guarantees=True, extra=("--bytes-only",)),
        ),
        Competitor(
            "quix",
            "Quix Streams: dataframe(in).apply(passthrough).to_topic(out), Quix's AvroSerializer "
            "and AvroDeserializer behind the single-object header",
            _plain("bench.peers.quix_pass"),
            str(common.PEERS_PYTHON),
            (common.AVRO,),
            (sfapp.AT_LEAST_ONCE,),
        ),
        Competitor(
            "faust",
            "faust-streaming: an agent forwarding to a topic, a fastavro single-object codec",
            _plain("bench.peers.faust_pass"),
            str(common.PEERS_PYTHON),
            (common.AVRO,),
            (sfapp.AT_LEAST_ONCE,),
        ),
    )
}
DEFAULT_COMPETITORS = ["sf-batch", BASELINE, "sf-lineage", "quix", "faust"]


# -- one measured run ------------------------------------------------------------


def measure(
    topics: common.Topics, competitor: Competitor, run: Run, timeout: float
) -> dict[str, Any]:
    """Run one competitor over the whole input and return its numbers."""
    topics.create(run.output_topic)
    # Write back the previous run's dirty pages now, not in the middle of this run.
    os.sync()
    load_before = os.getloadavg()[0]
    cpu_before = common.cpu_children()
    spawned = time.monotonic()
    child = Child(
        competitor.command(run), run.workdir / f"{run.group}.log", python=competitor.python
    )
    try:
        first = child.expect("first", timeout)
        busy_first, ticks_first = common.machine_ticks()
        deadline = time.monotonic() + timeout
        while (written := topics.end_offsets(run.output_topic)) < run.records:
            child.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {written} of {run.records} outputs after {timeout} s")
            time.sleep(_WATCH_INTERVAL_S)
        done = time.monotonic()
        cpu_done = common.cpu_of(child.process.pid)
        busy_done, ticks_done = common.machine_ticks()
        produced = child.expect("produced", 10)
    finally:
        code = child.stop()
    if code != 0:
        raise RuntimeError(f"{competitor.name} exited with {code}{child.tail()}")
    final = topics.end_offsets(run.output_topic)
    topics.delete(run.output_topic)
    wall = done - first["t"]
    cpu = cpu_done - first["cpu"]
    cpu_total = common.cpu_children() - cpu_before
    inproc = produced["t"] - first["t"]
    million = 1e6 / run.records
    return {
        "records_per_s": run.records / wall,
        "cpu_s_per_M": cpu * million,
        "cpu_total_s_per_M": cpu_total * million,
        "inproc_records_per_s": produced["records"] / inproc if inproc > 0 else None,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_total_s": cpu_total,
        "startup_s": first["t"] - spawned,
        # Other work on the machine shows here: the broker, the driver, anything else.
        "machine_busy": (busy_done - busy_first) / max(1, ticks_done - ticks_first),
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
        "outputs": final,
        "duplicates": final - run.records,
        # records per batch, and per transaction under exactly-once, as the child saw them
        "mean_batch": produced["records"] / produced["batches"] if "batches" in produced else None,
        "mean_transaction": (
            produced["records"] / produced["transactions"] if produced.get("transactions") else None
        ),
    }


# -- the whole benchmark ---------------------------------------------------------


def settings_drift() -> list[str]:
    """Client settings where the hand-written loop no longer matches the runtime.

    The child must not import streamflow, so it carries a copy; this keeps the copy honest.
    """
    from streamflow.runtime import clients

    drift = []
    for role, ours in (
        ("producer", common.PRODUCER_SETTINGS),
        ("consumer", common.CONSUMER_SETTINGS),
    ):
        theirs = getattr(clients, f"_{role.upper()}_DEFAULTS", None)
        if theirs is not None and theirs != ours:
            keys = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            drift.append(f"{role}: {', '.join(keys)}")
    return drift


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark on the broker of ``--bootstrap``, or on a devkit one of its own."""
    with common.broker(args.bootstrap) as (bootstrap, broker):
        return run_scenario(args, bootstrap=bootstrap, broker=broker)


def run_scenario(args: argparse.Namespace, *, bootstrap: str, broker: str) -> dict[str, Any]:
    """Every round of every competitor at every size, on a running broker."""
    competitors = [COMPETITORS[name] for name in args.competitors]
    drift = settings_drift()
    if drift:
        _say(
            "warning: bench/common.py's client settings differ from the runtime's: "
            + "; ".join(drift)
        )
    needs_registry = common.AVRO_REGISTRY in args.formats
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        registry, registry_kind = (
            stack.enter_context(common.schema_registry(args.registry))
            if needs_registry
            else (None, None)
        )
        runs = _all_runs(args, competitors, bootstrap, Path(tmp), registry)
    return {
        "benchmark": "passthrough",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "settings": {
            "records": args.records,
            "sizes": args.size,
            "formats": args.formats,
            "guarantees": args.guarantees,
            "registry": registry_kind,
            "rounds": args.rounds,
            "batch_size": args.batch_size,
            "partitions": common.PARTITIONS,
            "broker": broker,
            "competitors": {c.name: c.description for c in competitors},
            "versions": common.competitor_versions(),
            "order": "interleaved per round, reversed on odd rounds",
            "client_settings": {
                "producer": common.PRODUCER_SETTINGS,
                "consumer": common.CONSUMER_SETTINGS,
            },
            "client_settings_drift": drift,
        },
        "environment": common.environment(),
        "runs": runs,
        "summary": report.summarise(runs),
        "format_costs": report.format_costs(runs),
    }


def _all_runs(
    args: argparse.Namespace,
    competitors: list[Competitor],
    bootstrap: str,
    workdir: Path,
    registry: str | None,
) -> list[dict[str, Any]]:
    """Every measured run; the admin client (and its broker connection) dies on return."""
    topics = common.Topics(bootstrap)
    run_id = uuid.uuid4().hex[:6]
    runs: list[dict[str, Any]] = []
    try:
        for size in args.size:
            inputs: dict[str, tuple[str, int]] = {}  # format -> (input topic, encoded size)
            for fmt in args.formats:
                input_topic = f"bench.passthrough.in.{size}.{fmt}.{run_id}"
                topics.create(input_topic)
                started = time.monotonic()
                encoded = common.prefill(
                    bootstrap,
                    input_topic,
                    records=args.records,
                    size=size,
                    fmt=fmt,
                    registry=registry,
                )
                inputs[fmt] = (input_topic, encoded)
                _say(
                    f"size {size}, {fmt}: {args.records:,} records of {encoded} B prefilled "
                    f"in {time.monotonic() - started:.1f} s"
                )
            pairs = [
                (g, f, c)
                for g in args.guarantees
                for f in args.formats
                for c in competitors
                if f in c.formats and g in c.guarantees
            ]
            for round_ in range(args.rounds):
                for guarantee, fmt, competitor in pairs if round_ % 2 == 0 else pairs[::-1]:
                    input_topic, encoded = inputs[fmt]
                    short = "eos" if guarantee == sfapp.EXACTLY_ONCE else "alo"
                    group = f"bench-{run_id}-{competitor.name}-{fmt}-{short}-{size}-r{round_}"
                    run = Run(
                        bootstrap=bootstrap,
                        input_topic=input_topic,
                        output_topic=f"{group}.out",
                        group=group,
                        records=args.records,
                        batch_size=args.batch_size,
                        workdir=workdir,
                        format=fmt,
                        registry=registry,
                        guarantee=guarantee,
                    )
                    numbers = measure(topics, competitor, run, args.timeout)
                    runs.append(
                        {"competitor": competitor.name, "format": fmt, "size": size}
                        | {"guarantee": guarantee, "encoded_size": encoded, "round": round_}
                        | numbers
                    )
                    _say(
                        f"  round {round_} {competitor.name:<9} {fmt:<13} {short} "
                        f"{numbers['records_per_s']:>9,.0f} rec/s  "
                        f"{numbers['cpu_s_per_M']:6.1f} CPU s/M  "
                        f"{numbers['mean_batch'] or 0:5.0f} records/batch"
                        + (
                            f"  {numbers['mean_transaction']:6.0f} records/transaction"
                            if numbers["mean_transaction"]
                            else ""
                        )
                    )
            for input_topic, _ in inputs.values():
                topics.delete(input_topic)
    finally:
        topics.delete_all()
    return runs


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.passthrough", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument(
        "--size", type=int, nargs="+", default=[100, 1000], help="encoded record sizes in bytes"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=500, help="records per consume()")
    parser.add_argument(
        "--competitors", nargs="+", default=DEFAULT_COMPETITORS, choices=list(COMPETITORS)
    )
    parser.add_argument(
        "--formats",
        nargs="+",
        default=list(common.FORMATS),
        choices=common.FORMATS,
        help="topic formats (default: all); the peers run in avro only",
    )
    parser.add_argument(
        "--guarantees",
        nargs="+",
        default=list(GUARANTEES),
        choices=GUARANTEES,
        help="delivery guarantees (default: both); the peers run at-least-once only",
    )
    parser.add_argument(
        "--registry",
        default=os.environ.get(common.REGISTRY_ENV),
        help="a schema registry for avro-registry (default: $STREAMFLOW_SCHEMA_REGISTRY_URL, "
        "else start the devkit's)",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP"),
        help="an existing broker (default: $STREAMFLOW_KAFKA_BOOTSTRAP, "
        "else start the devkit broker)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run at most")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = bench(args)
    path = report.write(result, stem="passthrough")
    print(report.markdown(result))
    print(f"\nresults: {path.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
