"""The local supervisor follows its autoscaler: a made-up lag, real replica processes.

The lag comes from a stand-in measurement, so the counts are exact and
immediate; the processes are real (on the session's broker), so what is
checked is what runs: the replicas started and stopped for each decision, the
event lines, ``status.json``, a roll that keeps the autoscaler's count, and a
spec without ``autoscale:`` handing the count back to ``replicas``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamflow.blueprint.model import Application
from streamflow.operator import planner
from streamflow.operator.local import autoscaler, store
from streamflow.operator.local.supervisor import LocalSupervisor
from streamflow.runtime import grouplag
from tests.runtime import support
from tests.waiting import wait_until


class Lag:
    """The lag every measurement reports; set by the test."""

    def __init__(self) -> None:
        self.value = 0
        self.groups: list[str] = []

    def factory(self, app: Application, bootstrap: str) -> autoscaler.Measure:
        def measure(group: str, topics: list[str]) -> grouplag.GroupLag:
            self.groups.append(group)
            return grouplag.GroupLag(self.value, self.value, 0, 4)

        return measure


class Supervised:
    def __init__(self, home: store.Home, lag: Lag) -> None:
        self.home = home
        self.events: list[str] = []
        self.supervisor = LocalSupervisor(
            home=home,
            stop_timeout=30,
            on_event=lambda app, message: self.events.append(message),
            autoscale_interval=0.2,
            autoscale_measure=lag.factory,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.1):
            self.supervisor.tick()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.supervisor.stop()

    def running(self, app: Application) -> list[str]:
        return sorted(r.name for r in self.supervisor.replicas(app.name))

    def recorded(self, app: Application) -> dict[str, Any]:
        data = store.read_json(self.home.app(app.name).status)
        assert isinstance(data, dict)
        return data


@pytest.fixture
def lag() -> Lag:
    return Lag()


@pytest.fixture
def supervised(tmp_path: Path, lag: Lag) -> Iterator[Supervised]:
    running = Supervised(store.Home(tmp_path / "home"), lag)
    try:
        yield running
    finally:
        running.close()


def _app(bootstrap: str) -> Application:
    return support.make_app(
        bootstrap,
        streamlets={
            "scale": {
                "class": "apps:Scale",
                "autoscale": {"min": 1, "max": 3, "target_lag": 1000, "scale_down_after": 1},
            }
        },
        topics={
            "in": {"consumers": ["scale.in"], "partitions": 4},
            "out": {"producers": ["scale.out"]},
        },
    )


def test_the_supervisor_runs_the_autoscalers_count_through_scales_and_rolls(
    kafka_bootstrap: str, supervised: Supervised, lag: Lag
) -> None:
    app = _app(kafka_bootstrap)
    fingerprint = planner.fingerprint(app, "scale")
    assert supervised.supervisor.apply(app, bootstrap=kafka_bootstrap) == [
        planner.Create("scale", 1, fingerprint)
    ]

    lag.value = 2500  # 3 wanted
    wait_until(
        lambda: supervised.running(app) == ["scale-0", "scale-1", "scale-2"],
        timeout=30,
        what="the supervisor to start the replicas the autoscaler asked for",
    )
    assert lag.groups[0] == app.consumer_group("scale")
    assert any(
        e.startswith("autoscale: scale 1 → 3: scaled up: lag 2500") for e in supervised.events
    )
    wait_until(
        lambda: (
            supervised.recorded(app)["streamlets"]["scale"].get("autoscale", {}).get("lag") == 2500
        ),
        timeout=10,
        what="the decision in status.json",
    )
    recorded = supervised.recorded(app)["streamlets"]["scale"]
    assert recorded["replicas"] == 3 and recorded["autoscale"]["replicas"] == 3
    assert recorded["autoscale"]["decisions"] == 1
    assert (
        store.read_json(supervised.home.app(app.name).applied)["streamlets"]["scale"]["replicas"]
        == 1
    )  # the spec is the user's: the count is the autoscaler's

    # a roll (another class) restarts the streamlet at the autoscaler's count, not the spec's
    rolled_spec = dataclasses.replace(app.streamlets["scale"], class_path="apps:BatchScale")
    rolled = dataclasses.replace(app, streamlets={"scale": rolled_spec})
    assert supervised.supervisor.apply(rolled, bootstrap=kafka_bootstrap) == [
        planner.Roll("scale", planner.fingerprint(rolled, "scale"), 3)
    ]

    lag.value = 0  # down to min once 1 s of wanting it has passed
    wait_until(
        lambda: supervised.running(app) == ["scale-0"],
        timeout=30,
        what="the scale-down to min",
    )
    assert any(e.startswith("autoscale: scale 3 → 1: scaled down") for e in supervised.events)

    # without autoscale: the spec's replicas again, and no autoscaler left
    manual_spec = dataclasses.replace(rolled_spec, autoscale=None, replicas=2)
    manual = dataclasses.replace(rolled, streamlets={"scale": manual_spec})
    assert supervised.supervisor.apply(manual, bootstrap=kafka_bootstrap) == [
        planner.Scale("scale", 2, 1)
    ]
    lag.value = 10_000
    wait_until(
        lambda: "autoscale" not in supervised.recorded(app)["streamlets"]["scale"],
        timeout=10,
        what="the autoscale entry to go from status.json",
    )
    assert supervised.running(app) == ["scale-0", "scale-1"]
