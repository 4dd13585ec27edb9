"""The testkit and a deployed replica run one engine: the same inputs give the same records.

Each streamlet is run twice on the same inputs (good records, poison ones, bytes
that are not Avro, a record of another schema): once in a
:class:`~streamflow.testkit.StreamletHarness`, once as a replica on the real
broker. One partition keeps the order, so the outputs must be equal as lists,
and the dead letters equal in key, bytes and error (as sets: within a batch,
the records that did not decode go first, and the batches differ in size). ``Throttled`` pushes back
once in mid-stream: both must hand the batch back, retry it, and write each
output exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Message

from streamflow.api.outputs import RoutedOutput
from streamflow.testkit import StreamletHarness
from tests.runtime import apps, support

_POISON = {7, 150, 299}


def _inputs() -> list[tuple[str, bytes]]:
    good = support.readings(300, poison=_POISON)
    wrong_schema = support.codec("tests.runtime.Factor").encode({"version": 1, "factor": 2.0})
    garbage = [("g1", b"not avro at all"), ("g2", b"\xc3\x01\x00"), ("g3", b"")]
    return good[:100] + garbage + good[100:200] + [("w1", wrong_schema)] + good[200:]


def _in_the_testkit(cls: type[apps.Scale], inputs: list[tuple[str, bytes]]) -> StreamletHarness:
    h = StreamletHarness(cls, store=support.STORE, strict=False, batch_size=64)
    for key, data in inputs:
        h.feed("in", data, key=key)
    h.run()
    if cls is apps.Throttled:
        # like the replica: the batch holding seq 50 was handed back, and waits
        assert h.backpressure == "the downstream service is busy"
        assert h.pending > 0
        h.run()
    assert h.pending == 0 and h.backpressure is None
    return h


def _dead(m: Message) -> tuple[str, bytes, str, str]:
    headers = dict(m.headers() or [])
    return (
        m.key().decode(),
        m.value() or b"",
        headers["streamflow-error-type"].decode(),
        headers["streamflow-error"].decode(),
    )


@pytest.mark.parametrize(
    "cls", [apps.Scale, apps.BatchScale, apps.GenScale, apps.Throttled], ids=lambda c: c.__name__
)
def test_the_testkit_and_a_replica_write_the_same_records(
    kafka_bootstrap: str, tmp_path: Path, cls: type[apps.Scale]
) -> None:
    inputs = _inputs()
    expected_out = 300 - len(_POISON)
    expected_dead = len(inputs) - expected_out
    h = _in_the_testkit(cls, inputs)
    try:
        in_memory = [(o.key, o.value) for o in h.all_outputs]
        in_memory_dead = [
            (d.key or "", d.data, type(d.exception).__name__, str(d.exception))
            for d in h.dead_letters
        ]
    finally:
        h.teardown()
    assert len(in_memory) == expected_out and len(in_memory_dead) == expected_dead

    app = support.make_app(
        kafka_bootstrap,
        streamlets={"scale": {"class": f"apps:{cls.__name__}"}},
        topics={"in": {"consumers": ["scale.in"]}, "out": {"producers": ["scale.out"]}},
    )
    support.produce(kafka_bootstrap, support.topic(app, "in"), list(inputs))
    with support.replicas(app, tmp_path) as running:
        running.start("scale")
        out = support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(expected_out)
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("scale"), support.count_at_least(expected_dead)
        )
        log = running.log()
    decode = support.codec("tests.runtime.Scaled").decode
    on_the_broker = [(m.key().decode(), decode(m.value())) for m in out]
    assert on_the_broker == in_memory, log
    # within a batch, records that did not decode are dead-lettered first; batches differ
    assert sorted(_dead(m) for m in dead) == sorted(in_memory_dead), log
    if cls is apps.Throttled:
        assert "backing off 0.2s, the batch will be retried" in log


def test_an_output_the_testkit_reads_back_is_what_a_consumer_decodes() -> None:
    """The harness's outputs are decoded from the bytes the processor wrote."""
    h = StreamletHarness(apps.Scale, store=support.STORE)
    try:
        h.feed("in", {"id": "a", "seq": 1, "value": 2.5, "poison": False}, key="a")
        (out,) = h.run()
    finally:
        h.teardown()
    assert out == RoutedOutput(
        "out", "a", {"id": "a", "seq": 1, "value": 2.5, "factor_version": 0, "replica": 0}
    )
