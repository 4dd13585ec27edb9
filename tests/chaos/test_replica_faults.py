"""Replicas killed and rescaled under load: no id is lost, and none doubled under exactly-once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.chaos import harness
from tests.runtime import support
from tests.toxiproxy_fixtures import ProxiedKafka

GUARANTEES = ["at-least-once", "exactly-once"]
# the harness's own waits (minutes, each saying what it waited for) end a stuck scenario first
pytestmark = pytest.mark.timeout(1200)


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_kill_9_of_a_replica_twice_in_a_row(
    proxied_kafka: ProxiedKafka, tmp_path: Path, chaos_table: list[harness.Row], guarantee: str
) -> None:
    with harness.chaos_run(
        scenario="replica kill -9 twice",
        guarantee=guarantee,
        bootstrap=proxied_kafka.direct,
        direct=proxied_kafka.direct,
        tmp_path=tmp_path,
        table=chaos_table,
    ) as run:
        run.start(replicas=2)
        run.wait_mid_run()
        victim = run.started[0]
        with run.injecting():
            _kill_9(victim.pid)
            support.wait_for(
                lambda: victim.restarts >= 1 and victim.running,
                timeout=60,
                message="the supervisor to restart the killed replica",
            )
            _kill_9(victim.pid)  # the replacement dies too, while it is still starting
        run.finish()
        assert run.restarts() >= 2


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_scale_up_from_2_to_4_under_load(
    proxied_kafka: ProxiedKafka, tmp_path: Path, chaos_table: list[harness.Row], guarantee: str
) -> None:
    with harness.chaos_run(
        scenario="scale up 2 -> 4",
        guarantee=guarantee,
        bootstrap=proxied_kafka.direct,
        direct=proxied_kafka.direct,
        tmp_path=tmp_path,
        table=chaos_table,
    ) as run:
        run.start(replicas=2)
        run.wait_mid_run()
        with run.injecting():
            run.start_replica(2)
            run.start_replica(3)
            run.wait_all_assigned()
        run.finish()


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_scale_down_from_4_to_1_under_load(
    proxied_kafka: ProxiedKafka, tmp_path: Path, chaos_table: list[harness.Row], guarantee: str
) -> None:
    with harness.chaos_run(
        scenario="scale down 4 -> 1",
        guarantee=guarantee,
        bootstrap=proxied_kafka.direct,
        direct=proxied_kafka.direct,
        tmp_path=tmp_path,
        table=chaos_table,
    ) as run:
        run.start(replicas=4)
        run.wait_mid_run()
        with run.injecting():
            seen = len(run.running.lines)
            # SIGTERM: each finishes its batch, commits and leaves the group
            run.running.group.remove(*(replica.name for replica in run.started[1:]))
            _wait_owns_everything(run, after_line=seen)
        run.finish()


def _wait_owns_everything(run: harness.ChaosRun, *, after_line: int) -> None:
    """Until the one replica left has logged an assignment since ``after_line``."""
    survivor = run.started[0]
    support.wait_for(
        lambda: any(
            line.startswith(f"{survivor.name}| ") and f"assigned {run.in_topic}" in line
            for line in run.running.lines[after_line:]
        ),
        timeout=120,
        message=f"the last replica to take the partitions over\n{run.running.log()}",
    )


def _kill_9(pid: int | None) -> None:
    assert pid is not None, "the replica has no process"
    os.kill(pid, signal.SIGKILL)
