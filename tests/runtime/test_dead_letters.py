"""Undecodable bytes, the wrong schema and failing logic all end in the DLQ, counted exactly."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from streamflow.schema.codecs import SingleObjectCodec
from streamflow.schema.store import SchemaStore
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


def test_records_past_the_decode_limits_are_dead_lettered_before_they_are_built(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """An older writer of Reading carried an ``array<null>``: a record of it may declare
    100,000,000 items in 15 bytes. The replica refuses it with one line, keeps its
    memory, and every other record, of either version, comes out (counted)."""
    padded = {
        "type": "record",
        "name": "Reading",
        "namespace": "tests.runtime",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "seq", "type": "long"},
            {"name": "value", "type": "double"},
            {"name": "pad", "type": {"type": "array", "items": "null"}},
        ],
    }
    history = tmp_path / "older" / "history"
    history.mkdir(parents=True)
    (history / "reading-padded.avsc").write_text(json.dumps(padded))
    app = support.make_app(
        kafka_bootstrap,
        streamlets={"scale": {"class": "apps:Scale", "decode_limits": {"max_items": 1000}}},
        topics={"in": {"consumers": ["scale.in"]}, "out": {"producers": ["scale.out"]}},
        schema_paths=[support.HERE / "schemas", tmp_path / "older"],
    )
    writer = SingleObjectCodec(SchemaStore(app.schema_paths).version_from(padded))

    def pad(i: int, n: int) -> bytes:
        return writer.encode({"id": f"p{i}", "seq": i, "value": 1.0, "pad": [None] * n})

    # the empty array's one byte, 0, becomes a block of 100,000,000 items (then the 0)
    bombs = [("b1", pad(1, 0)[:-1] + b"\x80\x84\xaf\x5f\x00"), ("b2", pad(2, 1001))]
    assert len(bombs[0][1]) - len(writer.header) <= 20
    mixed = [
        *support.readings(100),
        ("p1", pad(1, 1000)),
        *bombs,
        *support.readings(100, start=100),
    ]
    support.produce(kafka_bootstrap, support.topic(app, "in"), mixed)

    with support.replicas(app, tmp_path) as running:
        running.start("scale")
        out = support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(201)
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("scale"), support.count_at_least(2)
        )
        assert len(out) == 201 and len(dead) == 2, running.log()
        assert "Traceback" not in running.log()

    assert {m.key().decode() for m in out} == {f"r{i}" for i in range(200)} | {"p1"}
    by_key = {m.key().decode(): dict(m.headers()) for m in dead}
    assert set(by_key) == {"b1", "b2"}
    for headers in by_key.values():
        error = headers["streamflow-error"].decode()
        assert "more than 1,000 items (decode_limits.max_items)" in error, error
        assert "\n" not in error
        assert headers["streamflow-error-type"] == b"DecodeError"
