"""A push's wait counts the replicas that really run, which an autoscaler decides.

A fake status topic (a consumer that hands out one record a poll) and a fake
target stand in for Kafka and the deployment, so these run in a blink.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from streamflow.blueprint.model import Application
from streamflow.operator import model_versions as versions
from streamflow.operator import targets
from streamflow.schema import SchemaStore, SingleObjectCodec

STORE = SchemaStore()


def app(replicas: int) -> Application:
    return Application.from_dict(
        {
            "name": "wine",
            "streamlets": {"classifier": {"class": "x:Y", "replicas": replicas}},
            "topics": {},
        }
    )


class Message:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value


class StatusTopic:
    """A reader of the status topic: one record a poll, then nothing."""

    def __init__(self, records: Sequence[dict[str, Any]]) -> None:
        codec = SingleObjectCodec(STORE.get(versions.STATUS), store=STORE)
        self.pending = [Message(codec.encode(r)) for r in records]

    def assign(self, partitions: Any) -> None:
        pass

    def consume(self, n: int, timeout: float) -> list[Message]:
        if self.pending:
            return [self.pending.pop(0)]
        time.sleep(min(timeout, 0.05))
        return []

    def close(self) -> None:
        pass


@dataclasses.dataclass
class Clients:
    topic: StatusTopic

    def reader(self, **_: Any) -> StatusTopic:
        return self.topic


def status(replica: str, state: str = "serving") -> dict[str, Any]:
    return {
        "model": "wine",
        "version": 2,
        "state": state,
        "message": "",
        "replica": replica,
        "time": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    }


def wait(
    desired: Any, records: Sequence[dict[str, Any]], timeout: float = 3.0
) -> tuple[versions.Outcome, float, list[tuple[dict[str, str], int]]]:
    """The outcome of waiting for wine:2, how long it took, and the progress told."""
    channel = SimpleNamespace(
        clients=Clients(StatusTopic(records)),
        streamlet="classifier",
        status=SimpleNamespace(name="status"),
        statuses=SingleObjectCodec(STORE.get(versions.STATUS), store=STORE),
    )
    pushed = versions.Pushed("wine", 2, "keras", 0, "control", {0: 0})
    told: list[tuple[dict[str, str], int]] = []
    started = time.monotonic()
    found = versions.await_statuses(
        channel,  # type: ignore[arg-type]
        pushed,
        timeout=timeout,
        replicas=desired,
        progress=lambda states, count: told.append((dict(states), count)),
    )
    return found, time.monotonic() - started, told


def test_the_wait_counts_the_replicas_the_autoscaler_runs_not_the_spec() -> None:
    # spec 1 while 4 run: classifier-0 reports last and must still count
    order = ["classifier-1", "classifier-2", "classifier-3", "classifier-0"]
    outcome, _, told = wait(lambda: 4, [status(r) for r in order])
    assert sorted(outcome.statuses) == sorted(order) and outcome.served
    assert all(s["state"] == "serving" for s in outcome.statuses.values())
    assert told[-1] == (dict.fromkeys(order, "serving"), 4)


def test_fewer_running_replicas_than_the_spec_end_the_wait_early() -> None:
    outcome, took, _ = wait(lambda: 1, [status("classifier-0")], timeout=5.0)
    found = outcome.statuses
    assert list(found) == ["classifier-0"] and found["classifier-0"]["state"] == "serving"
    assert took < 4.0


def test_the_count_is_read_again_while_waiting() -> None:
    counts = iter([1, 2])
    records = [status("classifier-0", "loading"), status("classifier-1", "loading")]
    records += [status("classifier-1"), status("classifier-0")]
    outcome, _, _ = wait(lambda: next(counts, 2), records, timeout=5.0)
    assert sorted(outcome.statuses) == ["classifier-0", "classifier-1"] and outcome.replicas == 2
    assert all(s["state"] == "serving" for s in outcome.statuses.values())


def test_a_replica_without_a_final_word_is_named_with_its_last_state() -> None:
    outcome, _, _ = wait(
        lambda: 2, [status("classifier-0"), status("classifier-1", "loading")], 1.0
    )
    assert not outcome.served
    assert versions.unserved(outcome.statuses) == [
        "classifier-1 (loading: no final report within 1s)"
    ]


class Target:
    def __init__(self, desired: int | None) -> None:
        self.desired = desired

    def status(self, name: str) -> targets.AppStatus:
        if self.desired is None:
            raise targets.TargetError(f"no application {name!r} is deployed on the local target")
        streamlet = targets.StreamletStatus("classifier", desired=self.desired, ready=0, running=0)
        return targets.AppStatus(name, "local", "Running", "", True, (streamlet,))


def test_the_count_comes_from_the_targets_status_and_else_the_spec() -> None:
    target = Target(4)
    count = versions.replica_count(target, app(1), "classifier")  # type: ignore[arg-type]
    assert count() == 4
    target.desired = 0  # scaled to zero
    assert count() == 0
    target.desired = None  # undeployed meanwhile: the last count known
    assert count() == 0
    nothing = versions.replica_count(Target(None), app(3), "classifier")  # type: ignore[arg-type]
    assert nothing() == 3  # no deployment at all: the spec's


def test_replicas_named_by_their_pods_count_by_how_many_run() -> None:
    """On Kubernetes a replica's name is its pod's name hashed (`classifier-1312532417`),
    not its index: the wait counts the replicas heard from (this waited for
    `classifier-0` and `classifier-1`, which never report, on the real node)."""
    pods = ["classifier-1312532417", "classifier-3666402345"]
    outcome, took, _ = wait(lambda: 2, [status(pods[0]), status(pods[1])], timeout=5.0)
    assert sorted(outcome.statuses) == pods and outcome.served and outcome.replicas == 2
    assert took < 4.0

    outcome, _, _ = wait(lambda: 2, [status(pods[0])], timeout=1.0)  # one is silent
    assert not outcome.served
    assert versions.unserved(outcome.statuses) == [
        "classifier (replica 1 of 1 unheard) (no report: no final report within 1s)"
    ]
