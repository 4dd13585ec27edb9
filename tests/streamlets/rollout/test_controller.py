"""The rollout controller: evidence in, decisions and control records out.

The control records it writes are fed back as the serving control topic would bring
them, so each test walks a rollout the way it runs: shadow, canary steps, then a
promotion or a rollback, with each decision saying why.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from streamflow import ControlInlet
from streamflow.models.rollout_policy import Arm, Policy, PolicyError, Verdict, decide
from streamflow.streamlets.rollout import RolloutController
from streamflow.testkit import StreamletHarness
from tests.streamlets.rollout import rollout_support as r
from tests.streamlets.rollout.rollout_support import POLICY


def _harness() -> StreamletHarness:
    return StreamletHarness(RolloutController)


def _turn(
    h: StreamletHarness, evidence: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[tuple[str | None, dict[str, Any]]]]:
    """Feed evidence; the decisions, and the control records written (fed back, as the
    control topic brings them to every reader)."""
    h.feed("evidence", evidence, key="wine")
    h.run()
    decisions = h.values("decisions")
    control = h.outputs("control")
    h.clear()
    for key, record in control:
        h.control("model", record, key=key)
    h.clear()
    return decisions, control


def test_a_good_candidate_is_walked_through_every_step_and_promoted() -> None:
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "SHADOW"), key="wine#candidate")
    h.clear()
    decisions, control = _turn(
        h, [r.window(0, stable=(200, 0, 0), candidate=(200, 0, 0), shadow=True)]
    )
    assert [d["verdict"] for d in decisions] == ["ADVANCE"]
    assert decisions[0]["step"] == 1 and decisions[0]["agreement"] == pytest.approx(197 / 200)
    assert [(k, r["rollout"]) for k, r in control] == [
        ("wine#candidate", {"mode": "CANARY", "share": 10.0, "arms": []})
    ]
    # the canary step needs two windows: the first holds, and says why
    decisions, control = _turn(h, [r.window(1, stable=(180, 50, 40), candidate=(20, 50, 47))])
    assert [d["verdict"] for d in decisions] == ["HOLD"] and not control
    assert "1 of 2 windows" in decisions[0]["reason"]
    decisions, control = _turn(h, [r.window(2, stable=(180, 50, 40), candidate=(20, 50, 47))])
    assert [d["verdict"] for d in decisions] == ["ADVANCE"]
    assert control[0][1]["rollout"]["share"] == 50.0
    # the last step: labels decide, with the always-valid interval
    verdicts = []
    for index in range(3, 40):
        decisions, control = _turn(
            h, [r.window(index, stable=(100, 100, 80), candidate=(100, 100, 95))]
        )
        verdicts += [d["verdict"] for d in decisions]
        if control:
            break
    assert verdicts[-1] == "PROMOTE" and set(verdicts[:-1]) <= {"HOLD"}
    assert [(k, r["rollout"]) for k, r in control] == [
        ("wine", None),
        ("wine#candidate", {"mode": "END", "share": 0.0, "arms": []}),
    ]
    assert decisions[-1]["interval_low"] > 0 and "better" in decisions[-1]["reason"]
    sequences = [d["sequence"] for d in h.values("decisions")]
    assert sequences == sorted(sequences)
    # promoted: no rollout runs, so more evidence decides nothing
    decisions, control = _turn(h, [r.window(99, stable=(100, 100, 80), candidate=(100, 100, 95))])
    assert not decisions and not control
    h.teardown()


def test_a_worse_candidate_is_rolled_back_and_the_decision_names_the_evidence() -> None:
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 10.0), key="wine#candidate")
    h.clear()
    for index in range(40):
        decisions, control = _turn(
            h, [r.window(index, stable=(100, 100, 90), candidate=(100, 100, 70))]
        )
        if control:
            break
    assert decisions[-1]["verdict"] == "ROLLBACK"
    assert "less accurate" in decisions[-1]["reason"] and decisions[-1]["interval_high"] < 0
    assert decisions[-1]["candidate"]["labelled"] == 100 * (index + 1)
    assert [(k, r["rollout"]["mode"]) for k, r in control] == [("wine#candidate", "END")]
    assert "rolled back" in control[0][1]["description"]
    h.teardown()


def test_too_many_failures_roll_back_at_once() -> None:
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 10.0), key="wine#candidate")
    h.clear()
    decisions, control = _turn(
        h, [r.window(0, stable=(90, 0, 0), candidate=(90, 0, 0), failures=10)]
    )
    assert decisions[0]["verdict"] == "ROLLBACK" and "failed 10.0%" in decisions[0]["reason"]
    assert control[0][1]["rollout"]["mode"] == "END"


def test_a_restarted_controller_goes_on_where_it_was_and_decides_nothing_twice() -> None:
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 10.0), key="wine#candidate")
    h.clear()
    first = r.window(0, stable=(180, 50, 40), candidate=(20, 50, 47))
    decisions, _ = _turn(h, [first])
    assert [d["verdict"] for d in decisions] == ["HOLD"]
    h.teardown()
    again = h.restarted()
    again.control("model", r.descriptor(1), key="wine")  # the control topic, replayed
    again.control("model", r.candidate(2, "CANARY", 10.0), key="wine#candidate")
    again.clear()
    decisions, control = _turn(again, [first])  # the same window, read again
    assert not decisions and not control
    decisions, control = _turn(again, [r.window(1, stable=(180, 50, 40), candidate=(20, 50, 47))])
    assert [d["verdict"] for d in decisions] == ["ADVANCE"]  # two windows: the step is done
    assert decisions[0]["sequence"] == 2 and decisions[0]["candidate"]["records"] == 40
    again.teardown()


def test_a_share_set_by_hand_off_the_policy_is_left_alone() -> None:
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 33.0), key="wine#candidate")
    h.clear()
    decisions, control = _turn(h, [r.window(0, stable=(100, 100, 90), candidate=(100, 100, 10))])
    assert not decisions and not control


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("{not json", "not JSON"),
        ({"steps": [{"mode": "canary", "share": 10}]}, "never ends"),
        ({"steps": [{"mode": "canary", "share": 250}], "max_labels": 10}, "not a percent"),
        ({"steps": [{"mode": "ab"}], "max_labels": 10}, "shadow or canary"),
        ({"steps": [], "max_labels": 10}, "at least one step"),
        ({"steps": [{"mode": "shadow"}], "max_labels": 10, "alpah": 0.1}, "no field alpah"),
    ],
)
def test_a_hostile_policy_is_refused_and_the_candidate_rolled_back(policy: Any, said: str) -> None:
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 10.0, policy=policy), key="wine#candidate")
    h.clear()
    decisions, control = _turn(h, [r.window(0, stable=(100, 0, 0), candidate=(100, 0, 0))])
    assert decisions[0]["verdict"] == "ROLLBACK" and said in decisions[0]["reason"]
    assert [r["rollout"]["mode"] for _, r in control] == ["END"]
    decisions, control = _turn(h, [r.window(1, stable=(100, 0, 0), candidate=(100, 0, 0))])
    assert not decisions and not control  # once


def test_the_policy_round_trips_and_names_what_is_wrong() -> None:
    policy = Policy.from_mapping(POLICY)
    assert Policy.from_mapping(policy.to_mapping()) == policy
    with pytest.raises(PolicyError, match="step 2's windows is a whole number"):
        Policy.from_mapping(
            {**POLICY, "steps": [POLICY["steps"][0], {"mode": "canary", "windows": 1.5}]}
        )
    with pytest.raises(PolicyError, match="labels is true or false"):
        Policy.from_mapping({**POLICY, "labels": "yes"})


class DriftJudged(RolloutController):
    """A controller that also follows a drift detector's alerts."""

    drift = ControlInlet("drift", "streamflow.ml.DriftReport")


def _drift_report(version: int, drifted: bool) -> dict[str, Any]:
    return {
        "detector": "wine-drift",
        "source": "outputs",
        "model": "wine",
        "model_version": version,
        "model_version_from": "predictions",
        "config_version": 0,
        "window": {"index": 3, "records": 100, "start_time": 0, "end_time": 0, "offsets": []},
        "features": [],
        "signals": [],
        "drifted": drifted,
        "severity": "HIGH" if drifted else "NONE",
        "message": "",
        "replica": "",
        "time": 0,
    }


@pytest.mark.parametrize("drifted_version", [1, 2])
def test_a_drift_alarm_on_the_candidates_outputs_rolls_it_back(drifted_version: int) -> None:
    h = StreamletHarness(DriftJudged)
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 10.0), key="wine#candidate")
    h.control("drift", _drift_report(drifted_version, True), key="wine-drift:outputs:0")
    h.clear()
    decisions, control = _turn(h, [r.window(0, stable=(100, 0, 0), candidate=(100, 0, 0))])
    if drifted_version == 1:  # the stable version drifting is no verdict on the candidate
        assert [d["verdict"] for d in decisions] == ["HOLD"] and not control
    else:
        assert [d["verdict"] for d in decisions] == ["ROLLBACK"]
        assert "drift detector raised an alarm" in decisions[0]["reason"]
        assert decisions[0]["candidate"]["drift_alarm"] is True
    h.teardown()


def test_after_acting_nothing_more_is_decided_until_the_control_topic_says_so() -> None:
    """Evidence goes on arriving between the controller's act and its record coming back
    on the control topic: no second verdict (the e2e saw a promotion decided twice)."""
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 10.0), key="wine#candidate")
    h.clear()
    h.feed("evidence", [r.window(0, stable=(90, 0, 0), candidate=(90, 0, 0), failures=10)])
    h.run()
    assert [d["verdict"] for d in h.values("decisions")] == ["ROLLBACK"]
    written = h.outputs("control")
    h.clear()
    h.feed(
        "evidence",
        [r.window(i, stable=(90, 0, 0), candidate=(90, 0, 0), failures=10) for i in (1, 2)],
    )
    h.run()
    assert not h.values("decisions") and not h.outputs("control")
    for key, record in written:  # now it comes back: the rollout is over
        h.control("model", record, key=key)
    h.clear()
    h.feed("evidence", [r.window(3, stable=(90, 0, 0), candidate=(90, 0, 0))])
    h.run()
    assert not h.values("decisions") and not h.outputs("control")
    h.teardown()


def test_windows_that_ended_before_a_step_do_not_count_for_it() -> None:
    """A lagging partition's window of the last step's share comes after the advance: it
    counts for nothing (the review saw it satisfy the next step's two windows at once)."""
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "SHADOW"), key="wine#candidate")
    h.clear()
    decisions, _ = _turn(h, [r.window(5, stable=(200, 0, 0), candidate=(200, 0, 0), shadow=True)])
    assert [d["verdict"] for d in decisions] == ["ADVANCE"]
    late = [
        r.evidence(i, [r.version(1, False, 90, 0, 0), r.version(2, False, 10, 0, 0)], partition=1)
        for i in (3, 4)
    ]
    decisions, control = _turn(h, late)
    assert not decisions and not control
    decisions, control = _turn(h, [r.window(6, stable=(180, 50, 40), candidate=(20, 50, 47))])
    assert [d["verdict"] for d in decisions] == ["HOLD"] and decisions[0]["windows"] == 1
    assert decisions[0]["candidate"]["records"] == 20


def test_the_same_version_rolled_out_again_is_judged_afresh() -> None:
    """Rolled back, then started again by `rollout start --version 2`: a new rollout, with
    nothing carried over (the review saw the first one's rollback stick)."""
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 10.0), key="wine#candidate")
    h.clear()
    decisions, _ = _turn(h, [r.window(0, stable=(90, 0, 0), candidate=(90, 0, 0), failures=10)])
    assert [d["verdict"] for d in decisions] == ["ROLLBACK"]
    again = r.candidate(2, "CANARY", 10.0) | {"created_at": 5_000}
    h.control("model", again, key="wine#candidate")
    h.clear()
    decisions, _ = _turn(h, [r.window(1, stable=(180, 50, 40), candidate=(20, 50, 47))])
    assert [d["verdict"] for d in decisions] == ["HOLD"]
    assert (decisions[0]["sequence"], decisions[0]["windows"]) == (1, 1)


@pytest.mark.parametrize("seed", range(12))
def test_the_verdict_comes_on_the_window_whose_evidence_crosses_the_threshold(seed: int) -> None:
    """The issue's bound, "the controller decides within one evidence window of the
    threshold being crossed", held exactly: fed one window at a time, the controller
    holds while the policy on the evidence so far says hold, and acts on the very window
    where it first says otherwise (accuracy either way, or failures), never a window late."""
    rng = random.Random(seed)
    policy = {
        "steps": [{"mode": "canary", "share": 50, "windows": 1}],
        "margin": 0.05,
        "max_drop": 0.05,
        "max_labels": 1_000_000,
        "max_error_rate": 0.02,
    }
    accuracy = {"stable": 0.9, "candidate": rng.choice([0.7, 0.8, 0.92, 0.97])}
    h = _harness()
    h.control("model", r.descriptor(1), key="wine")
    h.control("model", r.candidate(2, "CANARY", 50.0, policy=policy), key="wine#candidate")
    h.clear()
    sums = {"stable": [0, 0, 0, 0], "candidate": [0, 0, 0, 0]}  # records, failures, labels, right
    for index in range(400):
        drawn: dict[str, tuple[int, int, int]] = {}
        failures = int(rng.random() < 0.01) * rng.randint(5, 40)  # the candidate's, now and then
        for arm in sums:
            records = rng.randint(100, 300)
            labelled = rng.randint(0, records)
            right = sum(rng.random() < accuracy[arm] for _ in range(labelled))
            drawn[arm] = (records, labelled, right)
            failed = failures if arm == "candidate" else 0
            for place, count in enumerate((records, failed, labelled, right)):
                sums[arm][place] += count
        expected = decide(
            Policy.from_mapping(policy), 0, index + 1, Arm(*sums["stable"]), Arm(*sums["candidate"])
        )
        window = r.window(
            index, stable=drawn["stable"], candidate=drawn["candidate"], failures=failures
        )
        decisions, control = _turn(h, [window])
        said = [d["verdict"] for d in decisions]
        assert said == [expected.verdict.name], (index, expected, decisions)
        if expected.verdict is not Verdict.HOLD:
            assert control, "it decided but did not act"
            break
    else:
        pytest.fail("no verdict in 400 windows")
    h.teardown()
