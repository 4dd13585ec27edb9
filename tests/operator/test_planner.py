"""The planner, without any cluster or process."""

from __future__ import annotations

import dataclasses

from streamflow.blueprint.model import Application
from streamflow.operator.planner import (
    Create,
    Delete,
    Roll,
    Scale,
    StreamletState,
    desired_state,
    plan,
)

BASE = {
    "name": "shop",
    "streamlets": {
        "source": {"class": "m:Source", "config": {"rate": 5}},
        "scorer": {"class": "m:Scorer", "config": {"threshold": 0.5}, "replicas": 2},
        "sink": {"class": "m:Sink"},
    },
    "topics": {
        "a": {"producers": ["source.out"], "consumers": ["scorer.in"], "partitions": 4},
        "b": {"producers": ["scorer.out"], "consumers": ["sink.in"]},
    },
}


def _app(**changes: object) -> Application:
    return Application.from_dict({**BASE, **changes})


def test_create_everything_from_nothing() -> None:
    actions = plan(desired_state(_app()), {})
    assert sorted(actions, key=str) == sorted(
        [
            Create("scorer", 2, desired_state(_app())["scorer"].fingerprint),
            Create("sink", 1, desired_state(_app())["sink"].fingerprint),
            Create("source", 1, desired_state(_app())["source"].fingerprint),
        ],
        key=str,
    )


def test_a_second_plan_is_empty() -> None:
    desired = desired_state(_app())
    assert plan(desired, desired) == []


def test_scale_up_and_down() -> None:
    app = _app()
    observed = desired_state(app)
    assert plan(desired_state(app.with_replicas("scorer", 5)), observed) == [Scale("scorer", 5, 2)]
    assert plan(desired_state(app.with_replicas("scorer", 0)), observed) == [Scale("scorer", 0, 2)]


def test_a_config_change_rolls_only_that_streamlet() -> None:
    app = _app()
    changed = app.with_config("scorer", {"threshold": 0.9})
    actions = plan(desired_state(changed), desired_state(app))
    assert actions == [Roll("scorer", desired_state(changed)["scorer"].fingerprint, 2)]


def test_scaling_never_rolls() -> None:
    app = _app()
    assert all(
        not isinstance(a, Roll)
        for a in plan(desired_state(app.with_replicas("sink", 3)), desired_state(app))
    )


def test_a_new_streamlet_and_a_removed_one() -> None:
    old = _app()
    streamlets = {k: v for k, v in BASE["streamlets"].items() if k != "sink"}  # type: ignore[attr-defined]
    streamlets["audit"] = {"class": "m:Audit"}
    topics = {
        "a": BASE["topics"]["a"],  # type: ignore[index]
        "b": {"producers": ["scorer.out"], "consumers": ["audit.in"]},
    }
    new = _app(streamlets=streamlets, topics=topics)
    actions = plan(desired_state(new), desired_state(old))
    assert actions[0] == Delete("sink")  # deletions come first
    assert Create("audit", 1, desired_state(new)["audit"].fingerprint) in actions
    # the scorer still writes to topic b (only b's consumer changed), so nothing rolls
    assert not any(isinstance(a, Roll) for a in actions)


def test_rebinding_a_port_to_another_topic_rolls_that_streamlet() -> None:
    old = _app()
    topics = {
        "a": BASE["topics"]["a"],  # type: ignore[index]
        "c": {"producers": ["scorer.out"], "consumers": ["sink.in"]},
    }
    new = _app(topics=topics)
    rolled = {
        a.streamlet for a in plan(desired_state(new), desired_state(old)) if isinstance(a, Roll)
    }
    assert rolled == {"scorer", "sink"}


def test_observed_drift_is_repaired() -> None:
    desired = desired_state(_app())
    drifted = dict(desired)
    drifted["scorer"] = dataclasses.replace(desired["scorer"], replicas=1)
    drifted["ghost"] = StreamletState("ghost", 1, "x")
    assert plan(desired, drifted) == [Delete("ghost"), Scale("scorer", 2, 1)]
