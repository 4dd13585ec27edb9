"""Progress on waits: plain lines on change for logs, a live line on a terminal, nothing when quiet.

The clock is faked and the live display is refreshed on each update, so nothing
here depends on timing. The rollout phrasing is checked on hand-made statuses.
"""

from __future__ import annotations

import io
import threading

import pytest
from rich.console import Console

from streamflow.cli import progress, rollout
from streamflow.operator import targets


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def plain_console(buffer: io.StringIO) -> Console:
    return Console(file=buffer, force_terminal=False, width=120)


def terminal_console(buffer: io.StringIO) -> Console:
    return Console(file=buffer, force_terminal=True, width=120, _environ={"TERM": "xterm"})


def test_lines_mode_writes_one_plain_line_per_change_and_never_per_poll() -> None:
    buffer, clock = io.StringIO(), FakeClock()
    with progress.waiting(
        "deploying wine", detail="classifier 0/2 ready", console=plain_console(buffer), clock=clock
    ) as wait:
        assert wait.mode is progress.Mode.LINES
        for detail in ["classifier 0/2 ready"] * 5 + ["classifier 1/2 ready"] * 3:
            clock.now += 1
            wait.update(detail)
        clock.now += 62
        wait.update("classifier 2/2 ready")
        wait.done("deployed wine: 2 replicas ready")
        wait.update("ignored after done")
    assert buffer.getvalue().splitlines() == [
        "deploying wine: classifier 0/2 ready [0s]",
        "deploying wine: classifier 1/2 ready [6s]",
        "deploying wine: classifier 2/2 ready [1m10s]",
        "deployed wine: 2 replicas ready in 1m10s",
    ]
    assert "\x1b[" not in buffer.getvalue()


def test_a_wait_without_detail_names_what_it_waits_for() -> None:
    buffer = io.StringIO()
    with progress.waiting("starting Kafka", console=plain_console(buffer), clock=FakeClock()):
        pass
    assert buffer.getvalue() == "starting Kafka… [0s]\n"


def test_a_terminal_gets_a_live_line_that_is_gone_when_the_wait_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)  # CI machines set it, and it means lines
    buffer, clock = io.StringIO(), FakeClock()
    console = terminal_console(buffer)
    with progress.waiting(
        "waiting for classifier to serve wine:2",
        detail="0/2 replicas",
        separator=" — ",
        console=console,
        clock=clock,
    ) as wait:
        assert wait.mode is progress.Mode.LIVE
        clock.now += 12
        wait.update("1/2 replicas, classifier-1 loading")
        drawn = buffer.getvalue()
        assert (
            "waiting for classifier to serve wine:2 — 1/2 replicas, classifier-1 loading" in drawn
        )
        assert "12s" in drawn
        assert "\x1b[" in drawn  # drawn in place, with cursor movements and colour
        wait.done("classifier serves wine:2 on 2/2 replicas")
    assert "classifier serves wine:2 on 2/2 replicas" in buffer.getvalue().splitlines()[-1]
    assert "in 12s" in buffer.getvalue()


@pytest.mark.parametrize(
    ("environ", "machine_output", "quiet", "mode"),
    [
        ({"TERM": "xterm"}, False, False, progress.Mode.LIVE),
        ({"TERM": "xterm"}, True, False, progress.Mode.LINES),  # -o json|yaml
        ({"TERM": "xterm", "CI": "true"}, False, False, progress.Mode.LINES),
        ({"TERM": "xterm", "CI": "0"}, False, False, progress.Mode.LIVE),
        ({"TERM": "dumb"}, False, False, progress.Mode.LINES),
        ({"TERM": "xterm"}, False, True, progress.Mode.QUIET),
    ],
)
def test_the_mode_follows_the_terminal_the_output_format_ci_and_quiet(
    monkeypatch: pytest.MonkeyPatch,
    environ: dict[str, str],
    machine_output: bool,
    quiet: bool,
    mode: progress.Mode,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    if "CI" in environ:
        monkeypatch.setenv("CI", environ["CI"])
    console = Console(file=io.StringIO(), force_terminal=True, _environ=environ)
    assert progress.choose_mode(console, machine_output=machine_output, quiet=quiet) is mode


def test_a_console_that_is_not_a_terminal_always_gets_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert progress.choose_mode(plain_console(io.StringIO())) is progress.Mode.LINES


def test_quiet_writes_nothing_at_all() -> None:
    buffer = io.StringIO()
    console = terminal_console(buffer)
    with progress.waiting("deploying wine", console=console, quiet=True) as wait:
        wait.update("classifier 1/2 ready")
        wait.done("deployed wine")
    assert buffer.getvalue() == ""


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (59.9, "59s"), (125, "2m05s"), (3725, "1h02m")]
)
def test_elapsed_time_is_short(seconds: float, text: str) -> None:
    assert progress.elapsed_text(seconds) == text


# -- what a rollout says ---------------------------------------------------------------------------


def replica(
    streamlet: str, index: int, *, ready: bool, reasons: tuple[str, ...] = ()
) -> targets.ReplicaStatus:
    return targets.ReplicaStatus(
        name=f"{streamlet}-{index}",
        streamlet=streamlet,
        index=index,
        running=True,
        ready=ready,
        reasons=reasons,
    )


def streamlet(name: str, desired: int, *replicas: targets.ReplicaStatus) -> targets.StreamletStatus:
    return targets.StreamletStatus(
        name=name,
        desired=desired,
        ready=sum(r.ready for r in replicas),
        running=sum(r.running for r in replicas),
        replicas=replicas,
    )


def app(*streamlets: targets.StreamletStatus, up_to_date: bool = True) -> targets.AppStatus:
    return targets.AppStatus(
        name="wine",
        target="local",
        phase="Pending",
        message="",
        up_to_date=up_to_date,
        streamlets=streamlets,
    )


def test_a_rollout_names_each_streamlet_its_count_and_why_the_first_late_replica_is_late() -> None:
    status = app(
        streamlet(
            "classifier",
            2,
            replica("classifier", 0, ready=True),
            replica("classifier", 1, ready=False, reasons=("model not loaded",)),
        ),
        streamlet("accuracy", 1),
    )
    assert rollout.describe(status) == (
        "classifier 1/2 ready (model not loaded), accuracy 0/1 ready (starting)"
    )
    assert rollout.describe(app(*status.streamlets, up_to_date=False)).endswith(
        "; the change is being applied"
    )


def test_a_scale_names_only_what_changed_with_its_change() -> None:
    status = app(
        streamlet("source", 1, replica("source", 0, ready=True)),
        streamlet(
            "classifier",
            4,
            *(replica("classifier", i, ready=i < 3) for i in range(4)),
        ),
    )
    assert rollout.describe(status, previous={"classifier": 2}) == (
        "classifier 2→4: 3/4 ready (starting)"
    )
    down = app(
        streamlet("classifier", 1, *(replica("classifier", i, ready=True) for i in range(3)))
    )
    assert rollout.describe(down, previous={"classifier": 3}) == (
        "classifier 3→1: 1/1 ready (2 stopping)"
    )


def test_many_streamlets_are_summed_up_and_only_the_late_ones_named() -> None:
    ready = [streamlet(f"s{i}", 1, replica(f"s{i}", 0, ready=True)) for i in range(5)]
    late = streamlet("late", 1, replica("late", 0, ready=False))
    assert rollout.describe(app(*ready, late)) == "5/6 streamlets ready, late 0/1 ready (starting)"


def test_a_blocking_call_runs_while_its_progress_is_polled() -> None:
    buffer = io.StringIO()
    left = iter(["3 replicas left", "1 replica left"])
    release = threading.Event()
    polled: list[str] = []

    def poll() -> str | None:
        detail = next(left, None)
        if detail is None:
            release.set()  # the call may finish once every count was shown
        else:
            polled.append(detail)
        return detail

    def call() -> str:
        assert release.wait(30)
        return "stopped"

    with progress.waiting("stopping wine", console=plain_console(buffer)) as wait:
        assert rollout.run_with_progress(call, wait=wait, poll=poll) == "stopped"
    assert polled == ["3 replicas left", "1 replica left"]
    assert [line.split(" [")[0] for line in buffer.getvalue().splitlines()] == [
        "stopping wine…",
        "stopping wine: 3 replicas left",
        "stopping wine: 1 replica left",
    ]


def test_an_error_of_the_blocking_call_is_raised_in_the_caller() -> None:
    def call() -> None:
        raise targets.TargetError("no application 'wine' is deployed")

    with (
        progress.waiting("stopping wine", console=plain_console(io.StringIO())) as wait,
        pytest.raises(targets.TargetError, match="no application"),
    ):
        rollout.run_with_progress(call, wait=wait, poll=lambda: None)
