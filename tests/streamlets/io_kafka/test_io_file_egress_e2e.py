"""FileEgress under a kill: what Kafka counts as consumed is always in the file.

KAFKA_E2E.md item 2. The sink dawdles after writing each batch (before the
runtime may store its offsets), the replica is killed with SIGKILL mid-run and
restarted by the supervisor. Throughout, every record below the group's
committed offset must already be in the file; at the end every record is in it
at least once.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

from confluent_kafka import Consumer

from tests.streamlets.io_kafka import iohelpers as h

N = 4000


def test_a_killed_file_egress_never_commits_past_the_file_and_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    out = tmp_path / "events.jsonl"
    app = h.make_app(
        kafka_bootstrap,
        streamlets={
            "sink": {
                "class": "ioapps:SlowEventSink",
                "config": {"path": str(out), "pause": "250ms"},
            }
        },
        topics={"events": {"consumers": ["sink.in"]}},  # one partition: offset == seq
    )
    events = h.topic(app, "events")
    encode = h.codec().encode
    h.produce(kafka_bootstrap, events, [(str(i), encode(h.event(i))) for i in range(N)])
    offsets = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": app.consumer_group("sink")}
    )
    checks: list[tuple[int, int]] = []

    def committed_is_on_disk() -> bool:
        """Committed first, then the file (which only grows): offsets below it must be there."""
        commit = h.committed(offsets, events)
        on_disk = {r["seq"] for r in h.jsonl(out)}
        missing = set(range(commit)) - on_disk
        assert not missing, f"committed offset {commit}, but {len(missing)} records not on disk"
        checks.append((commit, len(on_disk)))
        return True

    try:
        with h.replicas(app, tmp_path) as running:
            victim = running.start("sink")
            h.wait(
                running,
                lambda: committed_is_on_disk() and h.committed(offsets, events) > 0,
                timeout=30,
                message="a first commit",
            )
            assert len(h.jsonl(out)) < N, "the sink finished before the kill; slow it down"
            assert victim.process is not None
            os.kill(victim.process.pid, signal.SIGKILL)
            victim.process.wait(10)
            committed_is_on_disk()  # the state the kill left behind
            h.wait(running, lambda: victim.restarts >= 1, timeout=30, message="a restart")
            h.wait(
                running,
                lambda: committed_is_on_disk() and len({r["seq"] for r in h.jsonl(out)}) >= N,
                timeout=60,
                message=f"all {N} records in the file",
            )
            h.wait(
                running,
                lambda: committed_is_on_disk() and h.committed(offsets, events) == N,
                timeout=30,
                message="the last commit",
            )
    finally:
        offsets.close()

    seqs = [r["seq"] for r in h.jsonl(out)]
    assert set(seqs) == set(range(N))
    ids = {r["id"] for r in h.jsonl(out)}
    assert ids == {str(uuid.UUID(int=i + 1, version=4)) for i in range(N)}
    assert len(checks) > 3
