"""Which run a score request resumes or begins, and the refusals that keep a resume honest.

An interrupted run's state lies beside its results; the same request resumes it.
A request that names another run, or an input that changed since the run began,
is refused with what to do instead, rather than mixing two runs' rows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamflow.score import engine, job

ENDS = {"out": {"0": 7}}


def request(tmp_path: Path, **changes: object) -> job.ScoreRequest:
    rows = tmp_path / "rows.jsonl"
    if not rows.exists():
        rows.write_text('{"a": 1}\n{"a": 2}\n')
    fields: dict[str, object] = {
        "input_path": rows,
        "fmt": "jsonl",
        "output_path": tmp_path / "results.jsonl",
    }
    return job.ScoreRequest(**{**fields, **changes})  # type: ignore[arg-type]


def interrupted(tmp_path: Path) -> engine.RunState:
    """A first run that sent one row of two, then stopped."""
    first = request(tmp_path, run_id="nightly")
    state = job.run_state(first, 2, lambda: ENDS)
    state.acknowledged = 1
    state.save(first.state_path)
    return state


def test_a_new_run_begins_at_the_result_topics_ends_and_is_saved(tmp_path: Path) -> None:
    state = job.run_state(request(tmp_path), 2, lambda: ENDS)
    assert state.run.startswith("score-") and state.total == 2 and state.offsets == ENDS
    assert engine.RunState.load(request(tmp_path).state_path) == state


def test_the_same_request_resumes_the_interrupted_run(tmp_path: Path) -> None:
    saved = interrupted(tmp_path)
    told: list[engine.RunState] = []

    def never() -> dict[str, dict[str, int]]:
        raise AssertionError("a resumed run keeps where it began")

    resumed = job.run_state(request(tmp_path), 2, never, on_resume=told.append)
    assert resumed == saved and told == [saved] and resumed.acknowledged == 1


def test_a_request_for_another_run_is_refused_naming_the_interrupted_one(tmp_path: Path) -> None:
    interrupted(tmp_path)
    with pytest.raises(job.ScoreFailed, match="state of run 'nightly', interrupted") as refused:
        job.run_state(request(tmp_path, run_id="other"), 2, lambda: ENDS)
    assert refused.value.hint == "--run-id nightly resumes it; --restart starts a new run"


def test_an_input_changed_since_the_run_began_is_refused(tmp_path: Path) -> None:
    interrupted(tmp_path)
    rows = request(tmp_path).input_path
    rows.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    os.utime(rows, ns=(0, 1))
    with pytest.raises(job.ScoreFailed, match="input changed since run 'nightly'") as refused:
        job.run_state(request(tmp_path), 3, lambda: ENDS)
    assert "--restart" in refused.value.hint


def test_restart_begins_a_new_run_over_the_interrupted_one(tmp_path: Path) -> None:
    interrupted(tmp_path)
    fresh = job.run_state(request(tmp_path, restart=True, run_id="again"), 2, lambda: ENDS)
    assert fresh.run == "again" and fresh.acknowledged == 0
    assert engine.RunState.load(request(tmp_path).state_path).run == "again"


def test_a_state_file_that_is_not_one_is_refused_and_named(tmp_path: Path) -> None:
    request(tmp_path).state_path.write_text("{not json")
    with pytest.raises(job.ScoreFailed, match=r"results\.jsonl\.score-state\.json is not"):
        job.run_state(request(tmp_path), 2, lambda: ENDS)


def test_an_application_that_is_not_there_is_asked_about(tmp_path: Path) -> None:
    def no_topics() -> dict[str, dict[str, int]]:
        raise engine.ScoreError("topic 'out' does not exist")

    with pytest.raises(job.ScoreFailed, match="'out' does not exist") as refused:
        job.run_state(request(tmp_path), 2, no_topics, app_name="wine")
    assert refused.value.hint.startswith("is 'wine' running?")
    assert not request(tmp_path).state_path.exists()
