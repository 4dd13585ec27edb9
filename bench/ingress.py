"""``python -m bench.ingress``: the HTTP ingress's throughput, this tree against a baseline.

``python -m bench.ingress [--baseline REV] [--rounds N] [--seconds S] [--bootstrap HOST:PORT]``

Each side is one ingress replica (``bench/ingress_child.py``) producing to the
same broker, and every ``202`` is after Kafka's acknowledgement, as in
production. The baseline's ``streamflow`` package is unpacked from git at
``REV`` (``git archive``), so both sides run the same child and the same
client; rounds alternate which side goes first, so drift on a shared machine
falls on both. The client is a small keep-alive HTTP/1.1 loop on raw asyncio
streams, lighter than httpx, so that it is not what is measured.

Two loads: single records (the per-request cost: parsing, routing, answering)
and batches of 100 (the per-record cost). Prints a Markdown table and the
ratio of this tree to the baseline; ``--json`` writes every round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "ingress_child.py"
LOADS = {"single records": (1, 16), "batches of 100": (100, 8)}  # (batch, connections)


@contextlib.contextmanager
def unpacked(rev: str) -> Iterator[Path]:
    """The ``streamflow`` package as it was at ``rev``, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="sf-baseline-") as tmp:
        archive = subprocess.run(
            ["git", "archive", rev, "streamflow"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


@contextlib.contextmanager
def replica(pythonpath: Path, bootstrap: str, topic: str) -> Iterator[int]:
    child = subprocess.Popen(
        [sys.executable, str(CHILD), "--bootstrap", bootstrap, "--topic", topic],
        cwd=tempfile.gettempdir(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(pythonpath)},
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        ready = json.loads(child.stdout.readline())
        assert ready["streamflow"].startswith(str(pythonpath)), ready
        yield int(ready["port"])
    finally:
        child.stdin.close()
        child.wait(30)


def request_bytes(batch: int) -> bytes:
    doc: Any = [{"id": str(i), "value": i * 0.5} for i in range(batch)]
    body = json.dumps(doc if batch > 1 else doc[0]).encode()
    head = (
        "POST /records HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def load(port: int, batch: int, connections: int, seconds: float) -> dict[str, float]:
    request = request_bytes(batch)
    accepted = 0
    failed = 0
    deadline = time.monotonic() + seconds

    async def connection() -> None:
        nonlocal accepted, failed
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                if head.startswith(b"HTTP/1.1 202"):
                    accepted += 1
                else:
                    failed += 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(connection() for _ in range(connections)))
    elapsed = time.monotonic() - started
    return {"requests_s": accepted / elapsed, "records_s": accepted * batch / elapsed,
            "failed": failed}  # fmt: skip


@contextlib.contextmanager
def scratch_topic(bootstrap: str) -> Iterator[str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-ingress-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    try:
        yield topic
    finally:
        admin.delete_topics([topic])[topic].result(30)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with scratch_topic(args.bootstrap) as topic:
        return _rounds(args, topic)


def _rounds(args: argparse.Namespace, topic: str) -> dict[str, Any]:
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"baseline": [], "tree": []} for name in LOADS
    }
    with unpacked(args.baseline) as baseline:
        sides = {"baseline": baseline, "tree": ROOT}
        for round_ in range(args.rounds):
            order = ["baseline", "tree"] if round_ % 2 == 0 else ["tree", "baseline"]
            for side in order:
                with replica(sides[side], args.bootstrap, topic) as port:
                    asyncio.run(load(port, 1, 4, 1.0))  # warm-up: topic metadata, connections
                    for name, (batch, connections) in LOADS.items():
                        got = asyncio.run(load(port, batch, connections, args.seconds))
                        results[name][side].append(got)
                        rate = f"{got['records_s']:,.0f} records/s"
                        print(f"round {round_ + 1} {side:8} {name}: {rate}", file=sys.stderr)
    return {"baseline": args.baseline, "rounds": args.rounds, "seconds": args.seconds,
            "results": results}  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"| load | baseline ({report['baseline']}) records/s | this tree records/s | ratio |",
        "|---|---|---|---|",
    ]
    for name, sides in report["results"].items():
        base = statistics.median(r["records_s"] for r in sides["baseline"])
        tree = statistics.median(r["records_s"] for r in sides["tree"])
        lines.append(f"| {name} | {base:,.0f} | {tree:,.0f} | {tree / base:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="the git revision to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--bootstrap", default=os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP"))
    parser.add_argument("--json", type=Path, help="write every round here")
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("name a broker: --bootstrap, or STREAMFLOW_KAFKA_BOOTSTRAP")
    report = run(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(markdown(report))


if __name__ == "__main__":
    main()
