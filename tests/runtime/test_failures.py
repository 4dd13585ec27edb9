"""Killed replicas and a restarted broker lose nothing."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from streamflow import devkit
from tests.runtime import support
from tests.waiting import wait_until

N = 100_000


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_kill_9_of_one_replica_mid_run(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    app = support.make_app(
        kafka_bootstrap,
        streamlets={"scale": {"class": "apps:Scale", "replicas": 2, "guarantee": guarantee}},
        topics={
            "in": {"consumers": ["scale.in"], "partitions": 4},
            "out": {"producers": ["scale.out"], "partitions": 4},
        },
    )
    support.produce(kafka_bootstrap, support.topic(app, "in"), support.readings(N))
    out_topic = support.topic(app, "out")
    with support.replicas(app, tmp_path) as running:
        victim = running.start("scale", 0)
        running.start("scale", 1)
        before = support.consume_until(
            kafka_bootstrap, out_topic, support.count_at_least(N // 4), timeout=120
        )
        assert len(before) < N, "the run finished before the kill; make it longer"
        assert victim.process is not None
        os.kill(victim.process.pid, signal.SIGKILL)  # the supervisor restarts it
        out = support.consume_until(kafka_bootstrap, out_topic, _all_keys(N), timeout=240)
        if guarantee == "exactly-once":
            # let anything that would be a duplicate arrive before counting
            wait_until(lambda: victim.restarts >= 1, timeout=60, what="a restart")
            out = support.consume_until(kafka_bootstrap, out_topic, _all_keys(N), timeout=60)
        log = running.log()

    counts = Counter(m.key().decode() for m in out)
    assert set(counts) == {f"r{i}" for i in range(N)}, log
    if guarantee == "exactly-once":
        duplicates = {k: c for k, c in counts.items() if c > 1}
        assert not duplicates, f"{len(duplicates)} keys written more than once"
        assert len(out) == N


def _all_keys(n: int):  # type: ignore[no-untyped-def]
    def done(records: list) -> bool:  # type: ignore[type-arg]
        return len(records) >= n and len({m.key() for m in records}) >= n

    return done


def test_broker_restart_mid_run_loses_nothing(
    kafka_broker: devkit.KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    app = support.make_app(
        bootstrap,
        streamlets={
            "count": {"class": "apps:Count", "config": {"count": 20_000}},
            "scale": {"class": "apps:Scale"},
        },
        topics={
            "in": {"producers": ["count.out"], "consumers": ["scale.in"], "partitions": 2},
            "out": {"producers": ["scale.out"], "partitions": 2},
        },
    )
    out_topic = support.topic(app, "out")
    with support.replicas(app, tmp_path) as running:
        scale = running.start("scale")
        wait_until(lambda: "assigned" in running.log(), timeout=60, what="assignment")
        source = running.start("count")
        support.consume_until(bootstrap, out_topic, support.count_at_least(1), timeout=60)
        kafka_broker.restart(hard=True)
        out = support.consume_until(bootstrap, out_topic, _all_keys(20_000), timeout=180)
        log = running.log()
        assert scale.restarts == 0 and source.restarts == 0, log
        assert scale.running and source.running, log
    assert {m.key().decode() for m in out} == {f"r{i}" for i in range(20_000)}, log
