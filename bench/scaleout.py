"""Scale-out: the passthrough and the embedded inference with 1 and 2 replicas.

Starting several replicas on a topic that already holds the data measures the group
join as much as the replicas: the first one to join takes every partition and starts,
and the rebalance that brings in the second one lands in the middle of the run. So the
input is written inside one Kafka transaction that stays open while the replicas
start. Their consumers read ``read_committed``, so they see nothing until it commits;
the driver waits until the group is stable with every replica holding its share of the
partitions, commits, and times from the commit to the N-th acknowledged output.

CPU is the replicas' own (user + system, all threads) over that same window, summed.
On a 2-core machine that also hosts the broker, two replicas cannot be much faster
than one; the point is to show how it scales here, as it is.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupState, Producer

from bench import common, sfapp
from bench.child import Child

REPLICAS = (1, 2)


def gated_input(
    bootstrap: str,
    topic: str,
    items: Iterable[tuple[bytes | None, bytes]],
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> Producer:
    """Write every item inside one open transaction; the caller commits it to start the run."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-gate-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": 600_000,
            "linger.ms": 50,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for key, value in items:
        while True:
            try:
                producer.produce(topic, value, key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"the gated input of {topic} was not acknowledged")
    return producer


def wait_stable(topics: common.Topics, group: str, members: int, timeout: float = 120) -> None:
    """Until the group is stable with ``members`` members that hold every partition."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = topics.admin.describe_consumer_groups([group])[group].result()
        held = [len(m.assignment.topic_partitions) for m in described.members]
        if (
            described.state == ConsumerGroupState.STABLE
            and len(held) == members
            and sum(held) == common.PARTITIONS
            and all(held)
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"group {group} did not settle with {members} members in {timeout:.0f} s")


def timed_release(
    topics: common.Topics, gate: Producer, output: str, n: int, cpu: Callable[[], float]
) -> dict[str, float]:
    """Commit the gate, then time until the output holds ``n`` records."""
    cpu_before = cpu()
    started = time.monotonic()
    gate.commit_transaction(60)
    deadline = started + 600
    while topics.end_offsets(output) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {n} outputs after 600 s")
        time.sleep(0.01)
    wall = time.monotonic() - started
    used = cpu() - cpu_before
    return {"records_per_s": n / wall, "wall_s": wall, "cpu_s_per_M": used * 1e6 / n}


def passthrough_run(
    bootstrap: str, workdir: Path, replicas: int, records: int, size: int
) -> dict[str, Any]:
    """The passthrough processor with ``replicas`` replica processes."""
    name = f"bench-scale-{uuid.uuid4().hex[:6]}-{replicas}"
    topics = common.Topics(bootstrap)
    children: list[Child] = []
    try:
        topics.create(f"{name}.in")
        topics.create(f"{name}.out")
        gate = gated_input(
            bootstrap, f"{name}.in", _pass_records(records, size), common.SCHEMA_HEADER
        )
        spec = sfapp.write_spec(
            workdir,
            name=name,
            input_topic=f"{name}.in",
            output_topic=f"{name}.out",
            replicas=replicas,
        )
        for index in range(replicas):
            argv = sfapp.command(spec, bootstrap=bootstrap, records=records, replica=index)
            children.append(Child(argv, workdir / f"{name}-{index}.log"))
        wait_stable(topics, sfapp.group(name), replicas)

        def cpu() -> float:
            return sum(common.cpu_of(child.pid) for child in children)

        return timed_release(topics, gate, f"{name}.out", records, cpu)
    finally:
        for child in children:
            child.stop()
        topics.delete_all()


def _pass_records(records: int, size: int) -> Iterable[tuple[bytes | None, bytes]]:
    wire = common.Wire(common.AVRO, topic="", registry=None)
    length = common.payload_length(wire, size)
    rng = random.Random(size)
    for seq in range(records):
        value = wire.encode(common.make_record(seq, rng.randbytes(length)))
        yield f"id-{seq:09d}".encode(), value


def embedded_run(
    bootstrap: str, workdir: Path, replicas: int, records: int, models: Any
) -> dict[str, Any]:
    """The wine classifier, embedded and batched, with ``replicas`` replica processes."""
    from bench import serving  # noqa: F401  # puts the repository root on sys.path for tests.*
    from tests.runtime import support
    from tests.streamlets.serving import kafka_support as k
    from tests.streamlets.serving import serving_support

    app = k.app(bootstrap, replicas, workdir / "cache")
    features = support.topic(app, "features")
    predictions = support.topic(app, "predictions")
    items = [(key.encode(), v) for key, v in k.features(models, records)]
    gate = gated_input(bootstrap, features, items)
    keras_file = models.v1.keras_file.read_bytes()
    k.push(bootstrap, app, serving_support.descriptor(1, "KERAS", data=keras_file))
    topics = common.Topics(bootstrap)
    with support.replicas(app, workdir) as running:
        processes = [running.start("classifier", index) for index in range(replicas)]
        k.wait_until_serving(bootstrap, app, 1, replicas)
        wait_stable(topics, app.consumer_group("classifier"), replicas)

        def cpu() -> float:
            return sum(common.cpu_of(p.pid) for p in processes if p.pid is not None)

        return timed_release(topics, gate, predictions, records, cpu)


def run_scenario(
    bootstrap: str,
    workdir: Path,
    *,
    rounds: int,
    records: int,
    inference_records: int,
    models: Any | None,
) -> dict[str, Any]:
    """Both workloads at 1 and 2 replicas, interleaved (1 2, 2 1, ...)."""
    runs: list[dict[str, Any]] = []
    for round_ in range(rounds):
        order = REPLICAS if round_ % 2 == 0 else REPLICAS[::-1]
        for replicas in order:
            numbers = passthrough_run(bootstrap, workdir, replicas, records, 100)
            runs.append(
                {"workload": "passthrough", "replicas": replicas, "round": round_, **numbers}
            )
            _say(f"  round {round_} passthrough x{replicas}: {numbers['records_per_s']:,.0f} rec/s")
            if models is None:
                continue
            numbers = embedded_run(bootstrap, workdir, replicas, inference_records, models)
            runs.append({"workload": "embedded", "replicas": replicas, "round": round_, **numbers})
            _say(f"  round {round_} embedded x{replicas}: {numbers['records_per_s']:,.0f} rec/s")
    return {
        "settings": {"rounds": rounds, "records": records, "inference_records": inference_records},
        "runs": runs,
    }


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
