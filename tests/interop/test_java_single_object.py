"""Streamflow and Apache Avro's Java reference, both ways through a running application.

A Java program built only on Avro's own ``BinaryMessageEncoder`` and
``BinaryMessageDecoder`` (tools/interop-java) writes wine samples into the
input topic of a pass-through application started with ``streamflow run``,
and reads back what the application writes to its output topic. The two sides
share no code, only the ``.avsc`` file: a record that streamflow cannot read,
or writes in a way Avro cannot, fails here.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from streamflow.schema import SchemaStore, SingleObjectCodec

# a cold Maven build and an embedded broker may come first, on 2 cores
pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
WINE_SCHEMA = REPO / "schemas" / "examples" / "wine" / "WineSample.avsc"
SAMPLE = "examples.wine.WineSample"
STREAMFLOW = Path(sys.executable).with_name("streamflow")
N = 500
WAIT_S = 120

MODULE = '''\
"""Hands every wine sample on unchanged."""

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet

SAMPLE = "examples.wine.WineSample"


class Passthrough(Streamlet):
    inp = Inlet("in", SAMPLE)
    out = Outlet("out", SAMPLE)

    def process(self, record: Record) -> dict[str, Any]:
        return record.value
'''

BLUEPRINT = """\
name: {app}
streamlets:
  relay:
    class: passthrough:Passthrough
topics:
  {samples}:
    consumers: [relay.in]
  {relayed}:
    producers: [relay.out]
"""


def wine_samples(count: int, *, seed: int = 7) -> list[dict[str, Any]]:
    """Samples shaped like the UCI data: a few decimals, a grade for most, non-ASCII ids."""
    rng = random.Random(seed)
    fields = [
        ("fixed_acidity", 4.0, 16.0, 1), ("volatile_acidity", 0.1, 1.6, 3),
        ("citric_acid", 0.0, 1.0, 2), ("residual_sugar", 0.6, 66.0, 1),
        ("chlorides", 0.009, 0.6, 3), ("free_sulfur_dioxide", 1.0, 289.0, 0),
        ("total_sulfur_dioxide", 6.0, 440.0, 0), ("density", 0.987, 1.039, 5),
        ("pH", 2.7, 4.0, 2), ("sulphates", 0.2, 2.0, 2), ("alcohol", 8.0, 14.9, 1),
    ]  # fmt: skip
    samples = []
    for i in range(count):
        sample: dict[str, Any] = {"id": f"château-{i:04d}"}
        for name, low, high, digits in fields:
            sample[name] = round(rng.uniform(low, high), digits)
        sample["quality"] = None if i % 5 == 0 else rng.randint(3, 9)
        samples.append(sample)
    samples[1]["alcohol"] = 0.1 + 0.2  # 17 significant digits: every bit must survive
    return samples


@contextlib.contextmanager
def streamflow_run(blueprint: Path, bootstrap: str, root: Path) -> Iterator[Callable[[], str]]:
    """``streamflow run`` of the blueprint in the background; yields a reader of its log.

    Stopped with Ctrl-C (SIGINT) as a user stops it, which must end it cleanly.
    """
    log = root / "run.log"
    env = {k: v for k, v in os.environ.items() if k != "STREAMFLOW_KAFKA_BOOTSTRAP"}
    env.update(STREAMFLOW_HOME=str(root / "home"), TMPDIR=str(root / "tmp"), COLUMNS="250")
    (root / "tmp").mkdir()
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(STREAMFLOW), "run", str(blueprint), "-b", bootstrap],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log.read_text
        assert process.poll() is None, f"streamflow run exited early:\n{log.read_text()}"
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def first_record(bootstrap: str, topic: str, *, timeout: float) -> Message:
    """The raw first record of a topic's partition 0, as any client sees it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"interop-raw-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                return message
    finally:
        consumer.close()
    raise AssertionError(f"no record in {topic} partition 0 after {timeout:.0f}s")


def java(command: list[str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_java_writes_what_streamflow_reads_and_reads_what_it_writes(
    interop_java: list[str],
    kafka_bootstrap: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    samples_topic = topic_factory("interop-samples", partitions=3)
    relayed_topic = topic_factory("interop-relayed", partitions=3)
    (tmp_path / "schemas").mkdir()
    schema_file = Path(shutil.copy(WINE_SCHEMA, tmp_path / "schemas"))
    (tmp_path / "passthrough.py").write_text(MODULE)
    blueprint = tmp_path / "blueprint.yaml"
    blueprint.write_text(
        BLUEPRINT.format(
            app=f"interop-{uuid.uuid4().hex[:8]}", samples=samples_topic, relayed=relayed_topic
        )
    )
    sent = wine_samples(N)
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(sample) + "\n" for sample in sent))
    kafka = ("--bootstrap", kafka_bootstrap, "--schema", str(schema_file))

    with streamflow_run(blueprint, kafka_bootstrap, tmp_path) as run_log:
        produced = java(
            interop_java, "produce", *kafka, "--topic", samples_topic,
            "--input", str(records), "--key-field", "id", timeout=WAIT_S,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        assert produced.stdout.strip() == f"produced {N} records to {samples_topic}"

        # Avro's Java writer: C3 01, the fingerprint streamflow computes, then the body,
        # byte for byte what streamflow's own encoder writes for the same sample; and no
        # streamflow-schema header, which streamflow must not need
        store = SchemaStore([tmp_path / "schemas"])
        schema = store.get(SAMPLE)
        raw = first_record(kafka_bootstrap, samples_topic, timeout=WAIT_S)
        value, key = raw.value(), raw.key()
        assert isinstance(value, bytes) and isinstance(key, bytes)
        assert value[:2] == b"\xc3\x01"
        assert value[2:10] == schema.fingerprint.to_bytes(8, "little")
        by_id = {sample["id"]: sample for sample in sent}
        assert value == SingleObjectCodec(schema, store=store).encode(by_id[key.decode()])
        assert raw.headers() is None

        consumed = java(
            interop_java, "consume", *kafka, "--topic", relayed_topic,
            "--count", str(N), "--timeout-s", str(WAIT_S), timeout=WAIT_S + 60,
        )  # fmt: skip
        assert consumed.returncode == 0, f"{consumed.stderr}\nstreamflow run:\n{run_log()}"

    decoded = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert len(decoded) == N
    assert {sample["id"] for sample in decoded} == set(by_id)
    assert {sample["id"]: sample for sample in decoded} == by_id
