"""The checks every target runs before a change, and the phase it reports. No broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamflow.blueprint.model import Application
from streamflow.operator import backends, targets
from streamflow.operator.targets import Phase

RUNTIME_TESTS = Path(__file__).parents[1] / "runtime"


def _app() -> Application:
    return Application.from_dict(
        {
            "name": "shop",
            "python_paths": [str(RUNTIME_TESTS)],
            "schema_paths": [str(RUNTIME_TESTS / "schemas")],
            "streamlets": {
                "count": {"class": "apps:Count", "config": {"count": 5}},
                "scale": {"class": "apps:Scale"},
                "controlled": {"class": "apps:Controlled"},
            },
            "topics": {
                "in": {
                    "producers": ["count.out"],
                    "consumers": ["scale.in", "controlled.in"],
                    "partitions": 4,
                },
                "factors": {"consumers": ["controlled.factor"], "partitions": 8},
                "out": {"producers": ["scale.out", "controlled.out"]},
            },
        }
    )


def test_scaled_sets_replicas_and_rejects_unknown_streamlets_and_negative_counts() -> None:
    app = targets.scaled(_app(), {"scale": 3, "count": 0})
    assert (app.streamlets["scale"].replicas, app.streamlets["count"].replicas) == (3, 0)
    with pytest.raises(targets.TargetError) as caught:
        targets.scaled(_app(), {"ghost": 1, "scale": -1})
    assert caught.value.problems == (
        "application 'shop' has no streamlet 'ghost' (its streamlets: count, scale, controlled)",
        "scale: the number of replicas must be 0 or more, not -1",
    )


def test_replicas_beyond_the_data_partitions_are_warned_about() -> None:
    app = targets.scaled(_app(), {"scale": 5, "controlled": 4, "count": 9})
    warnings = targets.idle_replica_warnings(app, ["scale", "controlled", "count"])
    # scale reads 4 partitions; controlled's 8-partition control topic is broadcast, so
    # only its 4 data partitions count; count has no inlet at all
    assert warnings == [
        "scale has 5 replicas but its input has 4 partition(s): 1 replica(s) will sit idle; "
        "add partitions to the input topic to use them"
    ]


def test_reconfigured_checks_each_value_with_its_parameter() -> None:
    app = targets.reconfigured(_app(), {"count.count": "12"})
    assert app.streamlets["count"].config == {"count": 12}
    with pytest.raises(targets.TargetError) as caught:
        targets.reconfigured(
            _app(), {"count.count": "many", "count.size": 1, "ghost.x": 1, "scale": 2}
        )
    problems = caught.value.problems
    assert "nothing was changed" in caught.value.message
    assert problems[0].startswith("count.count=many: invalid int: ")
    assert problems[1] == (
        "count.size=1: apps:Count has no config parameter 'size' (its parameters: count)"
    )
    assert problems[2].startswith("ghost.x=1: application 'shop' has no streamlet 'ghost'")
    assert problems[3] == "scale=2: expected streamlet.param=value"
    with pytest.raises(targets.TargetError):
        targets.reconfigured(_app(), {"count.count": -1})  # below its minimum


def test_effective_config_fills_in_defaults() -> None:
    assert targets.effective_config(_app()) == {
        "count": {"count": 5},
        "scale": {},
        "controlled": {},
    }
    bare = _app().to_dict()
    bare["streamlets"]["count"]["config"] = {}
    assert targets.effective_config(Application.from_dict(bare))["count"] == {"count": 1000}


def _streamlet(
    name: str, desired: int, *replicas: targets.ReplicaStatus
) -> targets.StreamletStatus:
    return targets.StreamletStatus(
        name=name,
        desired=desired,
        ready=sum(r.ready for r in replicas),
        running=sum(r.running for r in replicas),
        replicas=replicas,
    )


def _replica(name: str, *, running: bool = True, ready: bool = True) -> targets.ReplicaStatus:
    streamlet, _, index = name.rpartition("-")
    return targets.ReplicaStatus(
        name=name, streamlet=streamlet, index=int(index), running=running, ready=ready
    )


def test_the_phase_follows_the_replicas() -> None:
    ready = _streamlet("scale", 1, _replica("scale-0"))
    assert targets.phase_of([ready], up_to_date=True) == (Phase.RUNNING, "")
    assert targets.phase_of([ready], up_to_date=False)[0] is Phase.PENDING
    starting = _streamlet("scale", 1, _replica("scale-0", ready=False))
    assert targets.phase_of([starting], up_to_date=True) == (
        Phase.PENDING,
        "waiting for replicas to become ready: scale 0/1",
    )
    crashed = _streamlet("scale", 1, _replica("scale-0", running=False, ready=False))
    assert targets.phase_of([crashed], up_to_date=True) == (
        Phase.DEGRADED,
        "not running or restarting: scale-0",
    )
    assert targets.phase_of([ready], up_to_date=True, failure="no supervisor")[0] is Phase.FAILED
    status = targets.AppStatus("shop", "local", Phase.PENDING, "", True, (starting,))
    assert not status.settled and status.not_ready() == ["scale-0 (not answering)"]


def test_an_unknown_target_is_a_clear_error() -> None:
    with pytest.raises(targets.TargetError, match="unknown target 'mars'"):
        backends.get_target("mars")
