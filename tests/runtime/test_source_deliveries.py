"""A source counts what Kafka acknowledged, not what it handed over (issue 38, finding 2).

With the broker killed, the wine example's source kept logging "6586 records
emitted": it counted the records it produced, delivered or not. Here a paced
source runs against a broker of its own (`kafka_broker`), the broker is killed
and started again, and the source is stopped once its backlog is out: the count
it reports as delivered must be exactly what a reader finds in the topic, every
id from the first on, once. While the broker is away its delivered count stands
still and its queue stays within its bound, however long the source goes on.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from streamflow import devkit
from streamflow.operator.local import ReplicaProcess
from streamflow.runtime import shutdown, source
from tests.runtime import support
from tests.streamlets.io_kafka.iohelpers import read_topic
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

DELIVERED = "streamflow_records_delivered_total"
QUEUED = "streamflow_records_queued"
REPORT = re.compile(r"source: (\d+) records delivered, (\d+) not delivered")


def metric(replica: ReplicaProcess, name: str) -> float | None:
    """A replica's sample of ``name``; None when it has none (or does not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{replica.health_port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    found = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_the_delivered_count_is_what_a_reader_finds_once_the_broker_is_back(
    kafka_broker: devkit.KafkaBroker, tmp_path: Path, guarantee: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    app = support.make_app(
        bootstrap,
        streamlets={
            "paced": {"class": "stop_apps:Paced", "config": {"rate": 2000}, "guarantee": guarantee}
        },
        topics={"out": {"producers": ["paced.out"], "partitions": 2}},
        # a transactional producer's records expire with its transaction (10 s by default):
        # the broker's restart must not outlast them, or the source starts over
        kafka_config={"transaction.timeout.ms": "60000"},
    )
    with support.replicas(app, tmp_path) as running:
        paced = running.start("paced")

        def count(name: str) -> float:
            return metric(paced, name) or 0.0

        wait_until(
            lambda: count(DELIVERED) >= 500,
            what="the source to count records delivered",
            timeout=60,
            explain=running.log,
        )
        kafka_broker.kill()
        # at-least-once goes on writing (and what was in flight at the kill is told of
        # meanwhile); exactly-once waits for the commit of the chunk open at the kill
        waiting = 1000 if guarantee == "at-least-once" else 1
        wait_until(
            lambda: count(QUEUED) >= waiting,
            what="records waiting for the broker",
            timeout=30,
            explain=running.log,
        )
        stalled = count(DELIVERED)
        if guarantee == "at-least-once":
            wait_until(
                lambda: count(QUEUED) >= source.MAX_QUEUED,
                what="the source to go on until its queue is full",
                timeout=30,
                explain=running.log,
            )
            emitted = count("streamflow_records_out_total")
            assert count(QUEUED) <= source.MAX_QUEUED  # held back there, not growing
            assert count("streamflow_records_out_total") - emitted <= source.MAX_QUEUED
        assert count(DELIVERED) == stalled, "records counted as delivered to no broker"
        backlog = count("streamflow_records_out_total")  # written before the broker is back
        kafka_broker.start()
        wait_until(
            lambda: count(DELIVERED) >= backlog,
            what="the backlog delivered once the broker is back",
            timeout=120,
            explain=running.log,
        )
        running.group.remove(paced.name, timeout=shutdown.bound_s(shutdown.FLUSH_TIMEOUT_S))
        assert paced.process is not None and paced.process.returncode == 0, running.log()
        report = wait_until(
            lambda: next(
                (
                    m
                    for line in reversed(list(running.lines))
                    if line.startswith(f"{paced.name}| ") and (m := REPORT.search(line))
                ),
                None,
            ),
            what="the source's count at its stop",
            timeout=10,
            explain=running.log,
        )
        log = running.log()
    delivered, lost = int(report.group(1)), int(report.group(2))
    assert lost == 0, log
    records = read_topic(bootstrap, support.topic(app, "out"), timeout=60)
    keys = [m.key() for m in records]
    assert len(records) == delivered, f"{len(records)} read, {delivered} said delivered\n{log}"
    assert set(keys) == {f"r{i}".encode() for i in range(delivered)}, log
