"""What one Kafka transaction costs on this broker, call by call.

``python -m bench.transactions [--bootstrap HOST:PORT] [--transactions N]`` runs N small
transactions of the shape a streamflow batch has (one record out, the input's offset in
the transaction, then the commit) for each wait between a commit and the next
transaction's first record: 0 (back to back), 1, 2 and 4 ms, interleaved in blocks so
that drift of a shared machine hits all alike. ``ExactlyOnce.not_before`` is that wait
in the runtime, tuned by the refusals it meets.

For each it reports the p50 and p99 of every call and of the whole transaction, and the
share of transactions whose first record waited 20 ms or more: the coordinator was still
completing the previous transaction (``CONCURRENT_TRANSACTIONS``) and librdkafka retried
the partition 20 ms later. The latency scenario runs it too, and the summary prints it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench import common

__all__ = ["measure"]

CALLS = ("begin", "produce", "send_offsets", "commit", "total")
WAITS_MS = (0, 1, 2, 4)
MODES = tuple(f"{ms} ms" for ms in WAITS_MS)
# librdkafka retries a partition refused with CONCURRENT_TRANSACTIONS after 20 ms: a first
# record acknowledged that late met that retry.
_RETRIED_MS = 20.0
_BLOCK = 50  # transactions of one mode in a row


def measure(bootstrap: str, transactions: int = 800) -> dict[str, Any]:
    """Per wait, each call's p50/p99 in ms and the share of transactions that met the retry."""
    tag = f"bench-txn-{uuid.uuid4().hex[:6]}"
    topics = common.Topics(bootstrap)
    out, source = f"{tag}.out", f"{tag}.in"
    topics.create(out, partitions=1)
    topics.create(source, partitions=1)
    producer = Producer(
        {
            **common.PRODUCER_SETTINGS,
            "bootstrap.servers": bootstrap,
            "transactional.id": tag,
            "transaction.timeout.ms": 10_000,
        }
    )
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": tag})
    times: dict[str, dict[str, list[float]]] = {m: {c: [] for c in CALLS} for m in MODES}
    try:
        producer.init_transactions(30)
        metadata = consumer.consumer_group_metadata()
        committed_at = time.perf_counter()
        warmup = len(MODES) * _BLOCK  # the first block of each is a warm-up
        for i in range(transactions + warmup):
            block = (i // _BLOCK) % len(MODES)
            mode, wait_s = MODES[block], WAITS_MS[block] / 1000
            while time.perf_counter() < committed_at + wait_s:
                pass  # a spin: a sleep this short oversleeps
            t0 = time.perf_counter()
            producer.begin_transaction()
            t1 = time.perf_counter()
            producer.produce(out, b"x" * 100)
            producer.flush(10)
            t2 = time.perf_counter()
            offset = [TopicPartition(source, 0, i)]
            producer.send_offsets_to_transaction(offset, metadata, 10)
            t3 = time.perf_counter()
            producer.commit_transaction(10)
            committed_at = t4 = time.perf_counter()
            if i >= warmup:
                spans = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)
                for call, span in zip(CALLS, spans, strict=True):
                    times[mode][call].append(span * 1000)
    finally:
        consumer.close()
        producer.flush(5)
        topics.delete_all()
    return {mode: _stats(times[mode]) for mode in MODES}


def _stats(calls: dict[str, list[float]]) -> dict[str, Any]:
    result: dict[str, Any] = {"transactions": len(calls["total"])}
    for call, spans in calls.items():
        ordered = sorted(spans)
        result[call] = {
            "p50_ms": statistics.median(ordered),
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        }
    retried = sum(1 for span in calls["produce"] if span >= _RETRIED_MS)
    result["retried_share"] = retried / max(1, len(calls["produce"]))
    return result


def lines(result: dict[str, Any]) -> list[str]:
    """The result as a markdown table."""
    rows = [
        "| wait after a commit | transactions | "
        + " | ".join(f"{c} p50 / p99 (ms)" for c in CALLS)
        + " | met the 20 ms retry |",
        "|---|---:|" + "---:|" * len(CALLS) + "---:|",
    ]
    for mode in MODES:
        stats = result[mode]
        cells = " | ".join(f"{stats[c]['p50_ms']:.2f} / {stats[c]['p99_ms']:.2f}" for c in CALLS)
        rows.append(
            f"| {mode} | {stats['transactions']} | {cells} | {stats['retried_share']:.1%} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transactions", description=__doc__)
    parser.add_argument("--bootstrap", help="a running broker (default: a devkit one)")
    parser.add_argument("--transactions", type=int, default=800, help="in all (800)")
    parser.add_argument("--json", action="store_true", help="the raw result as JSON")
    args = parser.parse_args(argv)
    with common.broker(args.bootstrap) as (bootstrap, description):
        result = measure(bootstrap, args.transactions)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"one transaction on {description}:", *lines(result), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
