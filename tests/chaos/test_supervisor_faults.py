"""The supervision itself under fault: a replica whose loop is stuck, and a supervisor
killed with ``kill -9``. No id is lost; none is doubled under exactly-once.

* **stuck replica**: one replica hangs for good inside ``process`` (``apps:HangsOnce``,
  ``stall_after: 5s``). Its ``/healthz`` fails, the supervisor kills and restarts it,
  and its partitions' records come through. The fault ends when the stuck replica
  has been replaced, so *recover* is measured from there; the time to detect and
  replace it is asserted against the stated bound (``stall_after`` + 3 probes 5 s
  apart), with room for a loaded machine.
* **supervisor kill -9**: the local daemon behind ``streamflow deploy`` (a real
  detached process) is killed, then a replica too, which nothing restarts while no
  daemon runs. The next deploy starts a daemon that adopts the live replica and
  restarts the dead one. The fault ends when that deploy returns.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from streamflow.operator.local import pids, store
from streamflow.operator.local.target import LocalTarget
from tests.chaos import harness, traffic
from tests.runtime import support
from tests.toxiproxy_fixtures import ProxiedKafka

GUARANTEES = ["at-least-once", "exactly-once"]
STALL_AFTER_S = 5
DETECT_BOUND_S = STALL_AFTER_S + 3 * 5  # the bound the README states, before the restart


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_stuck_replica_is_replaced_within_the_bound(
    proxied_kafka: ProxiedKafka, tmp_path: Path, chaos_table: list[harness.Row], guarantee: str
) -> None:
    marker = tmp_path / "hung"
    hang_at = harness.DEFAULT_COUNT // 2
    with harness.chaos_run(
        scenario="stuck replica (liveness)",
        guarantee=guarantee,
        bootstrap=proxied_kafka.direct,
        direct=proxied_kafka.direct,
        tmp_path=tmp_path,
        table=chaos_table,
        streamlet={
            "class": "apps:HangsOnce",
            "config": {"marker": str(marker), "hang_at": hang_at},
            "stall_after": STALL_AFTER_S,
        },
    ) as run:
        run.start(replicas=2)
        support.wait_for(
            marker.exists, timeout=180, message=f"a replica to hang\n{run.running.log()}"
        )
        hung_at = time.monotonic()
        with run.injecting():
            support.wait_for(
                lambda: run.restarts() >= 1,
                timeout=180,
                message=f"the supervisor to replace the stuck replica\n{run.running.log()}",
            )
        replaced_after = run.fault.ended - hung_at
        run.finish()
        assert run.restarts() == 1
        assert any("is not live: stuck for" in line for line in run.running.lines)
        # the bound, plus a restart and a loaded machine's slack
        assert replaced_after < DETECT_BOUND_S + 45, replaced_after


class _DaemonLog:
    """What ChaosRun reads of its replicas (``lines``, ``log()``), from the files the
    daemon's replicas write themselves."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs

    @property
    def lines(self) -> list[str]:
        found = []
        for path in sorted(self.logs.glob("*.log")):
            name = path.name.removesuffix(".log")
            found += [f"{name}| {line}" for line in path.read_text(errors="replace").splitlines()]
        return found

    def log(self) -> str:
        return "\n".join(self.lines[-200:])


@dataclass
class _DaemonRun(harness.ChaosRun):
    """A scenario whose replicas run under the deploy daemon, not this process."""

    target: LocalTarget | None = None
    home: store.Home | None = None
    names: list[str] = field(default_factory=list)

    def rows(self) -> dict[str, dict[str, Any]]:
        assert self.home is not None
        status = store.read_json(self.home.app(self.app.name).status) or {}
        return {r["name"]: r for r in status.get("replicas", ())}

    def restarts(self) -> int:
        return sum(int(r.get("restarts", 0)) for r in self.rows().values())

    def deploy(self) -> None:
        assert self.target is not None
        self.target.deploy(self.app, bootstrap=self.direct)

    def start(self, replicas: int) -> None:
        self.deploy()
        self.names = [f"{harness.STREAMLET}-{i}" for i in range(replicas)]
        lines = cast(_DaemonLog, self.running)
        support.wait_for(
            lambda: all(
                any(
                    line.startswith(f"{name}| ") and f"assigned {self.in_topic}" in line
                    for line in lines.lines
                )
                for name in self.names
            ),
            timeout=120,
            message=f"every replica to own partitions\n{lines.log()}",
        )
        self.reader = traffic.OutputReader(
            self.direct, self.out_topic, self.app.dlq_topic(harness.STREAMLET)
        )
        self.reader.start()
        records = support.readings(
            self.count,
            poison={i for i in range(self.count) if i % harness.POISON_EVERY == 999},
        )
        self.producer = traffic.PacedProducer(self.direct, self.in_topic, records, self.rate)
        self.producer.start()


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_kill_9_of_the_supervisor_then_of_a_replica(
    proxied_kafka: ProxiedKafka, tmp_path: Path, chaos_table: list[harness.Row], guarantee: str
) -> None:
    app = harness.make_app(proxied_kafka.direct, guarantee=guarantee, replicas=2)
    home = store.Home(tmp_path / "home")
    run = _DaemonRun(
        scenario="supervisor kill -9, then a replica",
        guarantee=guarantee,
        app=app,
        direct=proxied_kafka.direct,
        running=cast(Any, _DaemonLog(home.app(app.name).logs)),
        table=chaos_table,
        target=LocalTarget(home=home.root),
        home=home,
    )
    try:
        run.start(replicas=2)
        run.wait_mid_run()
        before = run.rows()
        with run.injecting():
            daemon = int((store.read_json(home.daemon_record) or {})["pid"])
            os.kill(daemon, signal.SIGKILL)
            pids.wait_until(lambda: not pids.alive(daemon), timeout=30)
            victim = before["scale-0"]["pid"]
            os.kill(victim, signal.SIGKILL)  # nobody restarts it now
            pids.wait_until(lambda: not pids.alive(victim), timeout=30)
            run.deploy()  # a new daemon: adopts scale-1, restarts scale-0
            support.wait_for(
                lambda: pids.alive(run.rows().get("scale-0", {}).get("pid")),
                timeout=120,
                message="the new daemon to restart scale-0",
            )
        after = run.rows()
        assert after["scale-1"]["pid"] == before["scale-1"]["pid"]  # adopted, not replaced
        run.finish()
        assert run.restarts() == 1
    finally:
        if run.producer is not None:
            run.producer.stop()
        if run.reader is not None and run.reader.is_alive():
            run.reader.stop()
        _stop_daemon(home)
        traffic.delete_topics(proxied_kafka.direct, [*app.topics, app.dlq_topic(harness.STREAMLET)])


def _stop_daemon(home: store.Home) -> None:
    """SIGTERM the daemon (it stops its replicas), then anything of the home left over."""
    record = store.read_json(home.daemon_record) or {}
    pid = record.get("pid")
    if isinstance(pid, int) and pids.alive(pid):
        pids.terminate([pid], grace=60)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and pids.mentions(int(entry.name), str(home.root)):
            os.kill(int(entry.name), signal.SIGKILL)
