"""How long a drift detector's state takes to come back, and how big its changelog is.

``python -m bench.state_restore [--rows 100000] [--bootstrap host:9092]``

A detector with a first-N reference of 1,000 takes 1,000 + ``--rows`` points, so that
``--rows`` of them wait in its open window, in batches of 500, as the runtime would hand them over:
each batch's change goes through the detector's own code (:mod:`streamflow.
streamlets.drift.durable`) into the runtime's store, and from there to a compacted
changelog topic on a real broker. Then a replica "on another machine" (an empty
state directory) is assigned the partition: the runtime's restore reads the
changelog and fills SQLite, and the detector reads its window back.

Reported: the bytes written to the changelog, what compaction keeps (the live
keys), and the restore's time in two parts (the runtime's, the detector's).
Nothing here is a ratio: it is a property of the state's layout, not a race.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import common
from streamflow.api.streamlet import Record
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.state.changelog import KafkaChangelog
from streamflow.runtime.state.manager import StateManager
from streamflow.runtime.state.store import PartitionStore
from streamflow.streamlets.drift import durable, sources
from streamflow.streamlets.drift.settings import DriftSettings

BATCH = 500


def _points(n: int, start: int) -> list[Record]:
    import numpy as np

    rng = np.random.default_rng(start)
    x, y = rng.normal(size=n), rng.normal(size=n)
    colors = rng.choice(["red", "green", "blue"], size=n)
    return [
        Record(
            {"id": f"p{start + i}", "x": float(x[i]), "y": float(y[i]), "color": str(colors[i])},
            key=f"p{start + i}",
            inlet="in",
            topic="in",
            partition=0,
            offset=start + i,
            timestamp_ms=1_700_000_000_000 + start + i,
        )
        for i in range(n)
    ]


def measure(bootstrap: str, rows: int) -> dict[str, Any]:
    # a window one batch longer than the rows fed: every row is waiting in it
    settings = DriftSettings(
        name="d", numeric=("x", "y"), categorical=("color",), window=rows + BATCH, step=rows + BATCH
    )
    topic = f"bench-state-{uuid.uuid4().hex[:8]}.changelog"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    written = records = 0
    with tempfile.TemporaryDirectory() as scratch:
        store = PartitionStore(Path(scratch) / "one.sqlite", inlet="in", partition=0)
        fresh = sources.Source.start("inputs", settings, layout=settings.layout)
        tracked = durable.load(store, fresh, settings)
        started = time.perf_counter()
        for first in range(0, settings.reference_size + rows, BATCH):
            batch = _points(BATCH, first)
            got, _ = sources.input_rows(batch, tracked.source)
            after, _ = tracked.source.absorb(got, settings)
            tracked = durable.save(store, tracked, after, settings=settings, verdict=False)
            for key, value in store.changes():
                producer.produce(topic, value, key.encode(), partition=0)
                written += len(key) + len(value or b"")
                records += 1
            store.commit()
            producer.poll(0)
        assert producer.flush(60) == 0
        writing = time.perf_counter() - started
        keys, live = store.size()
        held = tracked.source.state.filled
        store.close()

        clients = KafkaClients(bootstrap=bootstrap)
        manager = StateManager(
            changelogs={"in": ("in", topic)},
            directory=Path(scratch) / "elsewhere",
            reader=KafkaChangelog(clients, client_id="bench-restore"),
        )
        started = time.perf_counter()
        manager.on_assign([TopicPartition("in", 0)])
        runtime_s = time.perf_counter() - started
        started = time.perf_counter()
        back = durable.load(manager.partition("in", 0), fresh, settings)
        detector_s = time.perf_counter() - started
        assert back.source.state.filled == held == rows, (back.source.state.filled, held)
        manager.close()
    admin.delete_topics([topic])
    return {
        "window_rows": rows,
        "reference_rows": settings.reference_size,
        "batches": (settings.reference_size + rows) // BATCH,
        "changelog_records": records,
        "changelog_bytes_written": written,
        "live_keys": keys,
        "live_value_bytes": live,
        "write_s": round(writing, 2),
        "restore_runtime_s": round(runtime_s, 3),
        "restore_detector_s": round(detector_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="records in the window")
    parser.add_argument("--bootstrap", default=None, help="a broker (default: a devkit one)")
    args = parser.parse_args()
    with common.broker(args.bootstrap) as (bootstrap, _):
        result = measure(bootstrap, args.rows)
    print(json.dumps(result, indent=2))
    out = common.REPO / "bench" / "results" / f"state-restore-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
