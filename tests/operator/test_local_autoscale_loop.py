"""The local autoscaler's rounds, with a made-up lag and clock: no broker, no processes.

What is checked is what the supervisor and ``status`` rely on: the counts the
policy decides are kept and recorded as changes, a failed measurement keeps
the count and says why, a new spec clamps or drops counts, and what the
supervisor writes to ``status.json`` reads back as the status contract.
``scale`` of an autoscaled streamlet is refused for every target alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamflow.blueprint import verify
from streamflow.blueprint.model import Application, AutoscaleSpec
from streamflow.cli import deploy_views
from streamflow.operator import targets
from streamflow.operator.local import autoscaler
from streamflow.runtime import grouplag

RUNTIME_TESTS = Path(__file__).parents[1] / "runtime"
EXAMPLE = Path(__file__).parents[2] / "blueprints" / "autoscale" / "blueprint.yaml"
AUTOSCALE = {"min": 1, "max": 8, "target_lag": 5000, "scale_down_after": 20}


def _app(autoscale: dict[str, Any] | None = AUTOSCALE, *, replicas: int = 1) -> Application:
    return Application.from_dict(
        {
            "name": "shop",
            "python_paths": [str(RUNTIME_TESTS)],
            "schema_paths": [str(RUNTIME_TESTS / "schemas")],
            "streamlets": {
                "controlled": {
                    "class": "apps:Controlled",
                    "replicas": replicas,
                    "autoscale": autoscale,
                },
                "count": {"class": "apps:Count"},
            },
            "topics": {
                "in": {"producers": ["count.out"], "consumers": ["controlled.in"], "partitions": 8},
                "factors": {"consumers": ["controlled.factor"], "partitions": 2},
                "out": {"producers": ["controlled.out"]},
                "applied": {"producers": ["controlled.applied"]},
            },
        }
    )


class Broker:
    """A made-up lag per round; ``fail`` makes the next rounds raise instead."""

    def __init__(self) -> None:
        self.lag = 0
        self.produced = 0
        self.fail: Exception | None = None
        self.asked: list[tuple[str, list[str]]] = []

    def measure(self, group: str, topics: list[str]) -> grouplag.GroupLag:
        self.asked.append((group, topics))
        if self.fail is not None:
            raise self.fail
        return grouplag.GroupLag(self.lag, self.produced, self.produced - self.lag, 8)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _autoscaler(
    app: Application, broker: Broker, clock: Clock
) -> tuple[autoscaler.AppAutoscaler, Callable[[float], None]]:
    scaler = autoscaler.AppAutoscaler(
        app, measure=broker.measure, interval=5, clock=clock, wall=clock
    )

    def rounds_for(seconds: float) -> None:
        end = clock.now + seconds
        while clock.now < end:
            clock.now += 5
            scaler.step()

    return scaler, rounds_for


def test_a_burst_scales_up_at_once_and_down_after_the_window_each_change_recorded() -> None:
    broker, clock = Broker(), Clock()
    scaler, rounds_for = _autoscaler(_app(), broker, clock)
    assert scaler.counts() == {"controlled": 1}
    assert scaler.status()["controlled"]["reason"].startswith("waiting for the first")

    broker.lag = broker.produced = 200_000
    scaler.step()
    # the group of the streamlet, on its data inlet only: the control topic is broadcast
    assert broker.asked == [("shop.controlled", ["in"])]
    assert scaler.counts() == {"controlled": 8}
    assert scaler.applied_to(_app()).streamlets["controlled"].replicas == 8
    [up] = scaler.take_changes()
    assert (up.before, up.after, up.lag) == (1, 8, 200_000)
    assert up.describe().startswith("autoscale: controlled 1 → 8: scaled up: lag 200000")
    assert "40 wanted, held at max 8" in up.describe()
    assert scaler.take_changes() == []

    broker.lag = 0  # drained: lower counts must be wanted for the whole 20 s first
    rounds_for(15)
    assert scaler.counts() == {"controlled": 8}
    assert "before scaling down" in scaler.status()["controlled"]["reason"]
    rounds_for(10)
    assert scaler.counts() == {"controlled": 1}
    [down] = scaler.take_changes()
    assert (down.before, down.after) == (8, 1)

    status = scaler.status()["controlled"]
    assert status["decisions"] == 2
    assert [(c["before"], c["after"]) for c in status["history"]] == [(1, 8), (8, 1)]
    assert status["decided_at"] == down.at == clock.now
    assert (status["min"], status["max"], status["target_lag"], status["lag"]) == (1, 8, 5000, 0)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (grouplag.GroupLagError("topic 'in' does not exist (yet)"), "does not exist (yet)"),
        (RuntimeError("the admin client broke"), "RuntimeError('the admin client broke')"),
    ],
)
def test_a_failed_measurement_keeps_the_count_and_says_why(error: Exception, said: str) -> None:
    broker, clock = Broker(), Clock()
    scaler, rounds_for = _autoscaler(_app(), broker, clock)
    broker.lag = broker.produced = 30_000
    scaler.step()
    assert scaler.counts() == {"controlled": 6}

    broker.fail = error
    rounds_for(60)  # longer than the window: no data must never mean "scale down"
    assert scaler.counts() == {"controlled": 6}
    reason = scaler.status()["controlled"]["reason"]
    assert reason.startswith("cannot measure the lag, keeping 6: ") and said in reason

    broker.fail, broker.lag = None, 60_000
    scaler.step()
    assert scaler.counts() == {"controlled": 8}
    assert scaler.status()["controlled"]["decisions"] == 2


def test_the_loop_thread_survives_a_round_that_raises() -> None:
    broker, clock = Broker(), Clock()
    scaler, _ = _autoscaler(_app(), broker, clock)
    scaler.interval = 0.01
    rounds: list[int] = []
    third = threading.Event()

    def broken() -> None:
        rounds.append(1)
        if len(rounds) >= 3:
            third.set()
        raise RuntimeError("a bug")

    scaler.step = broken  # type: ignore[method-assign]
    scaler.start()
    try:
        assert third.wait(10), "the loop stopped after a round raised"
    finally:
        scaler.stop()


def test_a_new_spec_keeps_the_count_clamps_it_to_new_bounds_or_drops_it() -> None:
    broker, clock = Broker(), Clock()
    scaler, _ = _autoscaler(_app(replicas=3), broker, clock)
    assert scaler.counts() == {"controlled": 3}  # starts from the spec's replicas

    scaler.update(_app({**AUTOSCALE, "target_lag": 1000}, replicas=1))  # a redeploy, a roll
    assert scaler.counts() == {"controlled": 3} and scaler.take_changes() == []

    scaler.update(_app({**AUTOSCALE, "max": 2}))
    assert scaler.counts() == {"controlled": 2}
    [clamped] = scaler.take_changes()
    assert (clamped.before, clamped.after, clamped.reason) == (3, 2, "the bounds are now 1..2")

    scaler.update(_app(None, replicas=5))
    assert scaler.counts() == {} and not scaler.active
    assert scaler.applied_to(_app(None, replicas=5)).streamlets["controlled"].replicas == 5


def test_the_recorded_status_reads_back_as_the_status_contract() -> None:
    broker, clock = Broker(), Clock()
    app = _app()
    scaler, _ = _autoscaler(app, broker, clock)
    broker.lag = broker.produced = 198_000
    scaler.step()
    recorded = {"replicas": 8, "autoscale": scaler.status()["controlled"]}

    status = autoscaler.recorded_status(app.streamlets["controlled"], recorded)
    assert status == targets.AutoscaleStatus(
        min=1,
        max=8,
        target_lag=5000,
        replicas=8,
        reason="scaled up: lag 198000 (target 5000 per replica), 40 wanted, held at max 8",
        decided_at=clock.now,
        lag=198_000,
        rate=None,
        decisions=1,
    )
    line = deploy_views.autoscale_line("controlled", status, now=clock.now + 12)
    assert line.plain == (
        "controlled  autoscale 1..8, target lag 5000: 8 replicas — scaled up: lag 198000 "
        "(target 5000 per replica), 40 wanted, held at max 8 (last change 12s ago, 1 change "
        "so far)"
    )

    # not autoscaled: nothing; bounds not applied yet: the spec's, and what runs
    assert autoscaler.recorded_status(_app(None).streamlets["controlled"], recorded) is None
    pending = autoscaler.recorded_status(
        _app({**AUTOSCALE, "max": 4}).streamlets["controlled"], recorded
    )
    assert pending is not None
    assert (pending.max, pending.replicas, pending.decisions) == (4, 4, 0)
    assert pending.reason == "waiting for the supervisor to apply the autoscaling"


def test_scale_refuses_an_autoscaled_streamlet_on_every_target() -> None:
    with pytest.raises(targets.TargetError) as caught:
        targets.scaled(_app(), {"controlled": 3, "count": 2})
    assert caught.value.problems == (
        "controlled is autoscaled between 1 and 8 replicas (target lag 5000); change its "
        "autoscale: in the blueprint and deploy it again",
    )
    assert "follow their input's lag" in caught.value.hint
    assert targets.scaled(_app(), {"count": 2}).streamlets["count"].replicas == 2


def test_the_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(autoscaler.INTERVAL_ENV, "2.5")
    assert autoscaler.default_interval() == 2.5
    for wrong in ("soon", "0", "-1"):
        monkeypatch.setenv(autoscaler.INTERVAL_ENV, wrong)
        assert autoscaler.default_interval() == autoscaler.INTERVAL_S


def test_the_example_blueprint_autoscales_its_scorer_on_its_samples() -> None:
    result = verify.verify_file(EXAMPLE)
    assert result.application is not None and result.problems == [], result.problems
    app = result.application
    assert app.streamlets["scorer"].autoscale == AutoscaleSpec(
        min=1, max=8, target_lag=5000, scale_down_after=60.0
    )
    assert app.streamlets["scorer"].replicas == 1
    assert targets.data_inputs(app, "scorer") == ["wine-autoscale-samples"]
    assert app.topics["wine-autoscale-samples"].partitions == 8


def test_a_measurement_that_straddles_a_new_spec_is_dropped() -> None:
    """A round measuring the old topics while a redeploy lands must not keep them."""
    broker, clock = Broker(), Clock()
    scaler, _ = _autoscaler(_app(), broker, clock)
    moved = Application.from_dict(
        {
            **_app().to_dict(),
            "topics": {
                **{k: v for k, v in _app().to_dict()["topics"].items() if k != "in"},
                "in-v2": {"producers": ["count.out"], "consumers": ["controlled.in"]},
            },
        }
    )

    def measure_then_redeploy(group: str, topics: list[str]) -> grouplag.GroupLag:
        scaler.update(moved)  # lands while this round measures, as a deploy can
        return grouplag.GroupLag(200_000, 200_000, 0, 8)

    broker.lag = broker.produced = 200_000
    scaler._measure = measure_then_redeploy  # type: ignore[method-assign]
    scaler.step()
    assert scaler.counts() == {"controlled": 1}  # the stale sample decided nothing
    scaler._measure = broker.measure  # type: ignore[method-assign]
    clock.now += 5
    scaler.step()
    assert broker.asked[-1] == ("shop.controlled", ["in-v2"])  # the new spec's topic


def test_the_data_inputs_leave_out_control_topics_even_without_the_class() -> None:
    app = _app()
    assert targets.data_inputs(app, "controlled") == ["in"]
    data = app.to_dict()
    data["streamlets"]["controlled"]["class"] = "nowhere:Missing"
    data["topics"]["factors"]["config"] = {"cleanup.policy": "compact"}
    assert targets.data_inputs(Application.from_dict(data), "controlled") == ["in"]
