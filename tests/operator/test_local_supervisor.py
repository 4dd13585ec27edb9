"""The local supervisor on the real broker, with real replica processes.

Each test applies specs to an in-process :class:`LocalSupervisor` (the same
one behind ``streamflow run`` and the ``deploy`` daemon) while a thread ticks
it, as the daemon does, and checks what runs: processes per replica, their
logs, what reached the output topic. Waits are on conditions, with timeouts.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from streamflow.blueprint.model import Application
from streamflow.operator import planner
from streamflow.operator.local import store
from streamflow.operator.local.processes import ReplicaProcess
from streamflow.operator.local.supervisor import LocalSupervisor
from tests.runtime import support
from tests.waiting import wait_until

N = 30_000


class Supervised:
    """A supervisor ticked by a thread, and where its state goes."""

    def __init__(self, home: store.Home) -> None:
        self.home = home
        self.supervisor = LocalSupervisor(home=home, stop_timeout=30)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            self.supervisor.tick()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.supervisor.stop()

    def replicas(self, app: Application) -> dict[str, ReplicaProcess]:
        return {r.name: r for r in self.supervisor.replicas(app.name)}

    def pids(self, app: Application) -> dict[str, int | None]:
        return {name: r.pid for name, r in self.replicas(app).items()}

    def log(self, app: Application, replica: str) -> str:
        try:
            return self.home.app(app.name).log_file(replica).read_text()
        except FileNotFoundError:
            return ""

    def status(self, app: Application) -> dict[str, Any]:
        data = store.read_json(self.home.app(app.name).status)
        assert isinstance(data, dict)
        return data


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Supervised]:
    running = Supervised(store.Home(tmp_path / "home"))
    try:
        yield running
    finally:
        running.close()


def _scaled_app(bootstrap: str) -> Application:
    return support.make_app(
        bootstrap,
        streamlets={"scale": {"class": "apps:Scale"}},
        topics={
            "in": {"consumers": ["scale.in"], "partitions": 4},
            "out": {"producers": ["scale.out"], "partitions": 4},
        },
    )


def _all_keys(n: int):  # type: ignore[no-untyped-def]
    def done(records: list[Message]) -> bool:
        return len(records) >= n and len({m.key() for m in records}) >= n

    return done


def _key(message: Message) -> str:
    key = message.key()
    assert key is not None
    return key.decode()


def _value(message: Message) -> bytes:
    value = message.value()
    assert value is not None
    return value


def _assigned_something(log: str) -> bool:
    """Whether a replica's log shows an assignment of at least one partition."""
    return any("assigned " in line and "assigned nothing" not in line for line in log.splitlines())


def test_scale_from_1_to_3_while_records_flow_rebalances_and_loses_nothing(
    kafka_bootstrap: str, supervised: Supervised
) -> None:
    app = _scaled_app(kafka_bootstrap)
    source, out_topic = support.topic(app, "in"), support.topic(app, "out")
    first = supervised.supervisor.apply(app, bootstrap=kafka_bootstrap)
    assert first == [planner.Create("scale", 1, planner.fingerprint(app, "scale"))]
    assert list(supervised.replicas(app)) == ["scale-0"]
    half, three_quarters = N // 2, 3 * N // 4
    support.produce(kafka_bootstrap, source, support.readings(half))
    support.consume_until(kafka_bootstrap, out_topic, support.count_at_least(1000), timeout=60)

    # records are flowing through scale-0, and more arrive during the rebalance: scale out
    during = threading.Thread(
        target=support.produce,
        args=(kafka_bootstrap, source, support.readings(three_quarters - half, start=half)),
    )
    during.start()
    three = app.with_replicas("scale", 3)
    pid_0 = supervised.pids(app)["scale-0"]
    assert supervised.supervisor.apply(three, bootstrap=kafka_bootstrap) == [
        planner.Scale("scale", 3, 1)
    ]
    pids = supervised.pids(app)
    assert sorted(pids) == ["scale-0", "scale-1", "scale-2"]
    assert pids["scale-0"] == pid_0 and len(set(pids.values())) == 3
    for name in ("scale-1", "scale-2"):
        wait_until(
            lambda name=name: _assigned_something(supervised.log(app, name)),  # type: ignore[misc]
            timeout=90,
            what=f"{name} to be assigned partitions",
        )
    during.join(60)
    support.produce(
        kafka_bootstrap, source, support.readings(N - three_quarters, start=three_quarters)
    )
    out = support.consume_until(kafka_bootstrap, out_topic, _all_keys(N), timeout=180)

    assert {_key(m) for m in out} == {f"r{i}" for i in range(N)}  # nothing lost
    scaled = support.codec("tests.runtime.Scaled")
    late = [scaled.decode(_value(m)) for m in out if int(_key(m)[1:]) >= three_quarters]
    assert {r["replica"] for r in late} == {0, 1, 2}  # the partitions spread over 3 processes
    assert supervised.status(app)["streamlets"] == {
        "scale": {"replicas": 3, "fingerprint": planner.fingerprint(app, "scale")}
    }

    # and back to one: the highest indexes stop, each after committing its batch
    assert supervised.supervisor.apply(app, bootstrap=kafka_bootstrap) == [
        planner.Scale("scale", 1, 3)
    ]
    assert supervised.pids(app) == {"scale-0": pid_0}
    for name in ("scale-1", "scale-2"):
        assert not _alive(pids[name])
        assert "stopped cleanly" in supervised.log(app, name)


def test_a_replica_killed_with_sigkill_is_restarted(
    kafka_bootstrap: str, supervised: Supervised
) -> None:
    app = _scaled_app(kafka_bootstrap)
    supervised.supervisor.apply(app, bootstrap=kafka_bootstrap)
    replica = supervised.replicas(app)["scale-0"]
    victim = replica.pid
    assert victim is not None
    wait_until(
        lambda: "health and metrics on" in supervised.log(app, "scale-0"),
        timeout=60,
        what="scale-0 to start",
    )
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: replica.restarts == 1 and replica.running and replica.pid != victim,
        timeout=30,
        what="scale-0 to be restarted",
    )
    wait_until(
        lambda: supervised.status(app)["replicas"][0]["restarts"] == 1,
        timeout=10,
        what="the restart in status.json",
    )
    row = supervised.status(app)["replicas"][0]
    assert row["last_exit"] == -signal.SIGKILL and row["pid"] == replica.pid and row["running"]
    assert supervised.supervisor.apply(app, bootstrap=kafka_bootstrap) == []  # nothing to do


def test_a_config_change_rolls_only_that_streamlet_and_a_second_apply_does_nothing(
    kafka_bootstrap: str, supervised: Supervised
) -> None:
    app = support.make_app(
        kafka_bootstrap,
        streamlets={
            "count": {"class": "apps:Count", "config": {"count": 10}},
            "scale": {"class": "apps:Scale", "replicas": 2},
        },
        topics={
            "in": {"producers": ["count.out"], "consumers": ["scale.in"], "partitions": 2},
            "out": {"producers": ["scale.out"]},
        },
    )
    supervisor = supervised.supervisor
    assert len(supervisor.apply(app, bootstrap=kafka_bootstrap)) == 2
    before = supervised.pids(app)
    assert sorted(before) == ["count-0", "scale-0", "scale-1"]
    for name in before:
        wait_until(
            lambda name=name: "health and metrics on" in supervised.log(app, name),  # type: ignore[misc]
            timeout=60,
            what=f"{name} to start",
        )
    assert supervisor.apply(app, bootstrap=kafka_bootstrap) == []  # idempotent
    assert supervised.pids(app) == before

    changed = app.with_config("count", {"count": 20})
    assert supervisor.apply(changed, bootstrap=kafka_bootstrap) == [
        planner.Roll("count", planner.fingerprint(changed, "count"), 1)
    ]
    after = supervised.pids(app)
    assert after["count-0"] != before["count-0"] and not _alive(before["count-0"])
    assert "stopped cleanly" in supervised.log(app, "count-0")  # SIGTERM, then a clean exit
    assert {k: v for k, v in after.items() if k != "count-0"} == {
        k: v for k, v in before.items() if k != "count-0"
    }
    spec = json.loads(supervised.home.app(app.name).applied.read_text())
    assert spec["streamlets"]["count"]["config"] == {"count": 20}  # what the new replica read
    assert supervisor.apply(changed, bootstrap=kafka_bootstrap) == []

    assert supervisor.remove(app.name)
    assert supervisor.replicas(app.name) == []
    assert not [pid for pid in after.values() if _alive(pid)]
    rows = supervised.status(app)["replicas"]
    assert rows and not any(row["running"] for row in rows)


def test_a_streamlet_at_zero_replicas_is_created_once(
    kafka_bootstrap: str, supervised: Supervised
) -> None:
    app = _scaled_app(kafka_bootstrap).with_replicas("scale", 0)
    first = supervised.supervisor.apply(app, bootstrap=kafka_bootstrap)
    assert first == [planner.Create("scale", 0, planner.fingerprint(app, "scale"))]
    assert supervised.supervisor.apply(app, bootstrap=kafka_bootstrap) == []
    assert supervised.replicas(app) == {}


def _alive(pid: int | None) -> bool:
    """Whether ``pid`` is still a process that is not a zombie."""
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
