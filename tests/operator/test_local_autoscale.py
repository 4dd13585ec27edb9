"""Autoscaling on the local target, on the real broker, deployed as a user deploys.

A slow streamlet (each replica does about 1,500 records/s, sleeping, not
spinning) reads an 8-partition topic and is autoscaled between 1 and 8
replicas at a target lag of 5,000. The test writes a burst of 200,000 records
straight into its input and then waits on what a user would watch: the
replicas scaled up, the lag drained, the replicas scaled back down once
``scale_down_after`` has passed. Nothing may be lost (every record id reaches
the output) and nothing may flap (the recorded changes are steps up, then
steps down, few of them). The sampling interval is the only knob set for the
test (``STREAMFLOW_AUTOSCALE_INTERVAL``); the windows come from the blueprint.

The measured figures go to ``autoscale-figures.json`` in the test's tmp dir
and to the test's ``record_property``, for the README and the closing note.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streamflow.runtime import grouplag
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.cli.test_deploy_cmds import Project, stop_leftovers
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(600)  # a deploy, a burst, its drain and two windows

BURST = 200_000
# How often the daemon measures the lag: its default, written out. Shorter sampling sees
# more of the drain's last seconds, and each sample on the way down can be a step of its own.
INTERVAL_S = "5"
SCALED_UP_WITHIN_S = 60.0  # from the burst written to the scale-up decision
SCALE_DOWN_AFTER_S = 20.0  # the blueprint's window

SCHEMA = """\
{"type": "record", "name": "Event", "namespace": "autoscaletest",
 "fields": [{"name": "id", "type": "string"}, {"name": "value", "type": "double"}]}
"""

MODULE = '''\
"""A streamlet that does a fixed number of records per second per replica."""

import asyncio
from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet, params

EVENT = "autoscaletest.Event"


class Slow(Streamlet):
    inp = Inlet("in", EVENT)
    out = Outlet("out", EVENT)
    rate = params.Float(default=1500.0, min=1.0, description="records/s per replica")

    async def process_batch(self, records: list[Record]) -> list[Any]:
        await asyncio.sleep(len(records) / self.rate)  # busy waiting, not busy computing
        return [record.value for record in records]
'''

BLUEPRINT = """\
name: {app}
streamlets:
  scorer:
    class: pipeline:Slow
    autoscale: {{min: 1, max: 8, target_lag: 5000, scale_down_after: 20s}}
topics:
  {app}-in:
    consumers: [scorer.in]
    partitions: 8
  {app}-out:
    producers: [scorer.out]
    partitions: 8
"""


@pytest.fixture
def project(
    tmp_path: Path, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Project]:
    monkeypatch.setenv("STREAMFLOW_AUTOSCALE_INTERVAL", INTERVAL_S)  # the daemon inherits it
    made = Project(root=tmp_path, app=f"autoscaletest-{uuid.uuid4().hex[:8]}")
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "event.avsc").write_text(SCHEMA)
    (tmp_path / "pipeline.py").write_text(MODULE)
    made.blueprint.write_text(BLUEPRINT.format(app=made.app))
    try:
        yield made
    finally:
        undeployed = made.cli("undeploy", made.app, "--delete-topics")
        if undeployed.returncode != 0:
            stop_leftovers(made)


def test_a_burst_scales_the_slow_streamlet_up_then_down_losing_nothing(
    project: Project,
    kafka_bootstrap: str,
    record_property: Any,
) -> None:
    deployed = project.cli("deploy", str(project.blueprint), "-b", kafka_bootstrap)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert _scaling(project)["replicas"] == 1
    scale = project.cli("scale", project.app, "scorer", "3")
    assert scale.returncode == 1
    assert "scorer is autoscaled between 1 and 8 replicas" in " ".join(scale.stderr.split())

    source, sink = f"{project.app}-in", f"{project.app}-out"
    values = _encoded_burst(project.root / "schemas")
    burst_start = time.time()
    _produce(kafka_bootstrap, source, values)
    written = time.time()

    wait_until(
        lambda: _scaling(project)["replicas"] >= 4,
        timeout=SCALED_UP_WITHIN_S,
        what="the autoscaler to scale up after the burst",
    )
    wait_until(
        lambda: _running(project) == _scaling(project)["replicas"],
        timeout=120,
        what="the scaled-up replicas to run",
    )
    running_at = time.time()
    peak = _scaling(project)["replicas"]
    up_status = project.cli("status", project.app)
    assert up_status.returncode == 0, up_status.stderr

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    group = f"{project.app}.scorer"
    wait_until(
        lambda: grouplag.measure(admin, group=group, topics=[source]).lag == 0,
        timeout=300,
        what="the lag to drain",
    )
    drained = time.time()
    wait_until(
        lambda: _scaling(project)["replicas"] == 1 and _running(project) == 1,
        timeout=SCALE_DOWN_AFTER_S + 60,
        what="the autoscaler to scale back down to 1",
    )

    ids = _distinct_keys(kafka_bootstrap, sink, until=BURST, timeout=180)
    assert len(ids) == BURST, f"{BURST - len(ids)} records lost"

    scaling = _scaling(project)
    steps = [(c["before"], c["after"]) for c in scaling["history"]]
    ups = [s for s in steps if s[1] > s[0]]
    assert steps == ups + [s for s in steps if s[1] < s[0]], f"flapping: {steps}"
    assert ups and steps[-1][1] == 1, steps
    assert scaling["decisions"] == len(steps) <= 4, steps
    first_up = scaling["history"][0]["at"]
    last_up = scaling["history"][len(ups) - 1]["at"]
    first_down, last_down = scaling["history"][len(ups)]["at"], scaling["history"][-1]["at"]

    table = project.cli("status", project.app)
    assert table.returncode == 0, table.stderr
    line = " ".join(table.stdout.split())
    assert "scorer autoscale 1..8, target lag 5000: 1 replica — " in line, table.stdout
    assert f"{len(steps)} changes so far" in line, table.stdout
    status = project.status()
    scorer = next(s for s in status["streamlets"] if s["name"] == "scorer")
    assert scorer["desired"] == 1 and scorer["autoscale"]["decisions"] == len(steps)

    figures = {
        "records": BURST,
        "burst_write_s": round(written - burst_start, 1),
        # from the first record of the burst: the autoscaler may act while it is written
        "burst_to_first_scale_up_s": round(first_up - burst_start, 1),
        "burst_to_scaled_up_s": round(last_up - burst_start, 1),
        "burst_to_replicas_running_s": round(running_at - burst_start, 1),
        "peak_replicas": peak,
        "burst_to_drained_s": round(drained - burst_start, 1),
        "drained_to_first_scale_down_s": round(first_down - drained, 1),
        "drained_to_scaled_down_s": round(last_down - drained, 1),
        "decisions": len(steps),
        "steps": steps,
        "sampling_interval_s": float(INTERVAL_S),
        "scale_down_after_s": SCALE_DOWN_AFTER_S,
        "status_when_up": up_status.stdout,
        "reasons": [c["reason"] for c in scaling["history"]],
    }
    (project.root / "autoscale-figures.json").write_text(json.dumps(figures, indent=2))
    for key, value in figures.items():
        record_property(key, value)
    print(json.dumps(figures, indent=2))  # with -s: the figures for the notes


def _scaling(project: Project) -> dict[str, Any]:
    """The scorer's autoscaler, as the daemon recorded it in status.json."""
    try:
        status = json.loads((project.app_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"replicas": -1, "history": [], "decisions": 0}
    found: dict[str, Any] = status["streamlets"]["scorer"].get("autoscale") or {}
    return {"replicas": -1, "history": [], "decisions": 0, **found}


def _running(project: Project) -> int:
    status = json.loads((project.app_dir / "status.json").read_text())
    return sum(1 for r in status["replicas"] if r["streamlet"] == "scorer" and r["running"])


def _encoded_burst(schemas: Path) -> list[tuple[bytes, bytes]]:
    store = SchemaStore([schemas])
    codec = SingleObjectCodec(store.get("autoscaletest.Event"), store=store)
    return [
        (f"e{i}".encode(), codec.encode({"id": f"e{i}", "value": float(i)})) for i in range(BURST)
    ]


def _produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for key, value in items:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def _distinct_keys(bootstrap: str, topic: str, *, until: int, timeout: float) -> set[bytes]:
    """Every distinct key in the topic, read from the start until ``until`` or the timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    keys: set[bytes] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(keys) < until and time.monotonic() < deadline:
            for message in consumer.consume(5000, 0.5):
                if message.error() is None and (key := message.key()) is not None:
                    keys.add(key)
    finally:
        consumer.close()
    return keys
