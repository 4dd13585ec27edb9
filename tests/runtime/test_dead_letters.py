"""Undecodable bytes, the wrong schema and failing logic all end in the DLQ, counted exactly."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.runtime import support


@pytest.mark.parametrize("logic", ["apps:Scale", "apps:BatchScale"])
def test_bad_records_are_dead_lettered_and_good_ones_flow(
    kafka_bootstrap: str, tmp_path: Path, logic: str
) -> None:
    app = support.make_app(
        kafka_bootstrap,
        streamlets={"scale": {"class": logic}},
        topics={
            "in": {"consumers": ["scale.in"], "partitions": 2},
            "out": {"producers": ["scale.out"]},
        },
    )
    good = support.readings(300, poison={7, 150, 299})
    wrong_schema = support.codec("tests.runtime.Factor").encode({"version": 1, "factor": 2.0})
    garbage = [("g1", b"not avro at all"), ("g2", b"\xc3\x01\x00"), ("g3", b"")]
    mixed = good[:100] + garbage + good[100:200] + [("w1", wrong_schema)] + good[200:]
    support.produce(kafka_bootstrap, support.topic(app, "in"), mixed)

    expected_out = 300 - 3
    expected_dead = 3 + 3 + 1  # poison + garbage + wrong schema
    with support.replicas(app, tmp_path) as running:
        running.start("scale")
        out = support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(expected_out)
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("scale"), support.count_at_least(expected_dead)
        )
        assert len(out) == expected_out, running.log()
        assert len(dead) == expected_dead, running.log()

    outputs = {m.key().decode() for m in out}
    assert outputs == {f"r{i}" for i in range(300)} - {"r7", "r150", "r299"}
    by_key = {m.key().decode(): dict(m.headers()) for m in dead}
    assert set(by_key) == {"r7", "r150", "r299", "g1", "g2", "g3", "w1"}
    for headers in by_key.values():
        for name in support.ERROR_HEADERS:
            assert name in headers
        assert headers["streamflow-source-topic"] == support.topic(app, "in").encode()
    assert by_key["g1"]["streamflow-error-type"] == b"DecodeError"
    assert b"marker" in by_key["g1"]["streamflow-error"]
    assert b"poison" in by_key["r7"]["streamflow-error"]
    assert by_key["w1"]["streamflow-error-type"] == b"DecodeError"
    # the dead letter keeps the original bytes, so it can be replayed after a fix
    original = dict(mixed)
    for m in dead:
        assert m.value() == original[m.key().decode()]


def test_sigterm_finishes_the_batch_commits_and_exits_zero(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app = support.make_app(
        kafka_bootstrap,
        streamlets={"scale": {"class": "apps:Scale"}},
        topics={"in": {"consumers": ["scale.in"]}, "out": {"producers": ["scale.out"]}},
    )
    support.produce(kafka_bootstrap, support.topic(app, "in"), support.readings(500))
    with support.replicas(app, tmp_path) as running:
        replica = running.start("scale")
        support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(500)
        )
        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGTERM)
        assert replica.process.wait(30) == 0, running.log()
        assert "stopped cleanly" in running.log()
        # a new replica starts after the committed offsets: nothing is processed twice
        support.produce(kafka_bootstrap, support.topic(app, "in"), support.readings(10, start=500))
        running.group.remove(replica.name)
        running.start("scale")
        out = support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(510)
        )
        extra = support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(511), timeout=3
        )
    assert len(out) == 510
    assert len(extra) == 510
