"""Where the suite's time goes: a per-directory table at the end of every run.

Every report's setup, call and teardown seconds are summed per directory under
tests/ (the first part of the path) and per parallel group (tests/tiers.py).
With pytest-xdist the reports reach the controller, so the table covers every
worker. Beside each directory's worker-seconds it shows its tests and its
slowest one; under the table, the wall time and how busy the workers were.

The suite is bound by the CPU on a 2-core machine, so each test's CPU seconds
are measured too, on the worker that runs it: what the worker and every process
under it used in each setup, call and teardown. `getrusage` counts a child only
once it has been waited for, so alone it would put the whole life of a broker a
module's fixture started on the test that ends it. So at both ends of a phase the
live descendants are read from /proc/<pid>/stat too (their own seconds, and their
waited-for children's; a walk of every process, about 7 µs each): a phase gets
their growth, plus what was waited for in it less what those that are gone had
used before it. A service shared by many tests (the worker's broker) counts in
each for what it used then. Left wrong: a process whose parent ends without
waiting for it is adopted by init, out of the tree, and counts until the end of
that phase only. One reaped outside the tree (so adopted, or its parent ignores
SIGCHLD) loses what it used in its last phase, and what it used before is taken
off only what was waited for in that phase, so no figure is negative. The
seconds come in 10 ms ticks; without /proc only waited-for children count. The
line under the table says how busy the machine's CPUs were over the run, all
processes together, from /proc/stat. The groups that use the most CPU are
listed: that is where the minutes are.

`STREAMFLOW_TEST_TIMES=FILE` also writes the table as Markdown to FILE, and the
groups' seconds beside it as `FILE.json`: copy that to tests/durations.json to
let the scheduler hand out the long groups first.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Collection, Generator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.tiers import TIERS

TIMES_ENV = "STREAMFLOW_TEST_TIMES"
CPU_PROPERTY = "cpu_s"
TOP_CPU_GROUPS = 15


Key = tuple[int, int]  # a process: its pid and start time, as a pid can be reused
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class TreeCpu:
    """A reading of CPU seconds, user and system: this process's own, the children
    it has waited for, and (own, waited-for children) of each live descendant."""

    own: float
    reaped: float
    processes: dict[Key, tuple[float, float]]


def _proc_stats() -> dict[int, tuple[int, Key, float, float]]:
    """Every process: pid -> (parent's pid, key, own s, waited-for children s); {} without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    stats: dict[int, tuple[int, Key, float, float]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:  # it has exited since the listing
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        # after the command's name in parentheses, which may hold spaces and parentheses
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) < 20:
            continue
        pid = int(name)
        stats[pid] = (
            int(fields[1]),  # field 4, the parent
            (pid, int(fields[19])),  # field 22, the start time
            (int(fields[11]) + int(fields[12])) / TICK,  # fields 14 and 15
            (int(fields[13]) + int(fields[14])) / TICK,  # fields 16 and 17
        )
    return stats


def tree_cpu(keep: Collection[Key] = ()) -> TreeCpu:
    """This process's tree now, with those of `keep` that have left it since."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    stats = _proc_stats()
    below: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _, _, _) in stats.items():
        below[parent].append(pid)
    processes: dict[Key, tuple[float, float]] = {}
    todo = list(below.get(os.getpid(), ()))
    while todo:
        pid = todo.pop()
        _, key, seconds, reaped = stats[pid]
        processes[key] = (seconds, reaped)
        todo += below.get(pid, ())
    if keep:
        for _, key, seconds, reaped in stats.values():
            if key in keep:
                processes[key] = (seconds, reaped)
    return TreeCpu(own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, processes)


def phase_cpu(start: TreeCpu, end: TreeCpu) -> float:
    """The tree's CPU seconds between two readings (`end` read with `keep=start.processes`).

    The growth of what is seen running, and of what was waited for less what the
    processes that are gone had used before: waiting moves a child's seconds into
    its parent's. Never less than what was seen running, in case one that is gone
    was waited for by a process outside the tree.
    """
    running = end.own - start.own
    reaped = end.reaped - start.reaped
    for key, (seconds, waited) in end.processes.items():
        before = start.processes.get(key, (0.0, 0.0))
        running += seconds - before[0]
        reaped += waited - before[1]
    gone = sum(sum(used) for key, used in start.processes.items() if key not in end.processes)
    return running + max(0.0, reaped - gone)


def machine_cpu() -> tuple[float, float] | None:
    """(busy, total) jiffies of every CPU since boot, from /proc/stat; None elsewhere."""
    try:
        fields = [float(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


class CpuMeter:
    """On a worker (or a run without workers): each phase's CPU seconds, in its report."""

    def __init__(self) -> None:
        self._started = TreeCpu(0.0, 0.0, {})

    def _phase(self) -> Generator[None, None, None]:
        self._started = tree_cpu()
        yield

    pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_phase)
    pytest_runtest_call = pytest.hookimpl(wrapper=True)(_phase)
    pytest_runtest_teardown = pytest.hookimpl(wrapper=True)(_phase)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        ended = tree_cpu(keep=self._started.processes)
        report.user_properties.append((CPU_PROPERTY, round(phase_cpu(self._started, ended), 3)))
        return report


@dataclass
class _Directory:
    seconds: float = 0.0
    cpu: float = 0.0
    tests: set[str] = field(default_factory=set)
    slowest: tuple[float, str] = (0.0, "")


class Timing:
    def __init__(self, workers: int) -> None:
        self.started = time.monotonic()
        self.workers = max(1, workers)
        self.directories: dict[str, _Directory] = defaultdict(_Directory)
        self.groups: dict[str, float] = defaultdict(float)
        self.tiers: dict[str, set[str]] = defaultdict(set)
        self.tier_seconds: dict[str, float] = defaultdict(float)
        self.per_test: dict[str, float] = defaultdict(float)
        self.group_cpu: dict[str, float] = defaultdict(float)
        self.machine = machine_cpu()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        parts = path.split("/")
        directory = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
        entry = self.directories[directory]
        properties = dict(report.user_properties)
        cpu = float(properties.get(CPU_PROPERTY, 0.0))
        entry.seconds += report.duration
        entry.cpu += cpu
        entry.tests.add(report.nodeid)
        self.per_test[report.nodeid] += report.duration
        if self.per_test[report.nodeid] > entry.slowest[0]:
            entry.slowest = (self.per_test[report.nodeid], report.nodeid)
        group = str(properties.get("group", path))
        self.groups[group] += report.duration
        self.group_cpu[group] += cpu
        for tier in TIERS:
            if tier in report.keywords:
                self.tiers[tier].add(report.nodeid)
                self.tier_seconds[tier] += report.duration

    def table(self) -> str:
        wall = time.monotonic() - self.started
        total = sum(d.seconds for d in self.directories.values())
        lines = [
            "| directory | tests | seconds | CPU s | share | slowest test (s) |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name, entry in sorted(self.directories.items(), key=lambda kv: -kv[1].seconds):
            slow_s, slow_id = entry.slowest
            share = entry.seconds / total if total else 0.0
            lines.append(
                f"| {name} | {len(entry.tests)} | {entry.seconds:.0f} | {entry.cpu:.0f} "
                f"| {share:.0%} "
                f"| {slow_id.split('/', 1)[-1]} ({slow_s:.0f}) |"
            )
        cpu = sum(d.cpu for d in self.directories.values())
        lines.append(f"| **all** | {len(self.per_test)} | {total:.0f} | {cpu:.0f} | 100% | |")
        busy = total / (wall * self.workers) if wall else 0.0
        lines.append("")
        lines.append(
            "Tiers: "
            + ", ".join(
                f"{tier} {len(self.tiers[tier])} tests {self.tier_seconds[tier]:.0f} s"
                for tier in TIERS
                if tier in self.tiers
            )
            + " (test-seconds)."
        )
        lines.append(
            f"Wall time {wall:.0f} s with {self.workers} worker(s): "
            f"{total:.0f} test-seconds, the workers busy {busy:.0%} of the time."
            + self._machine_line()
        )
        lines += [
            "",
            "The groups that used the most CPU (seconds, by the tests' own processes):",
            "",
        ]
        top = sorted(self.group_cpu.items(), key=lambda kv: -kv[1])[:TOP_CPU_GROUPS]
        lines += [
            f"- {group}: {seconds:.0f} CPU s in {self.groups[group]:.0f} s"
            for group, seconds in top
        ]
        return "\n".join(lines) + "\n"

    def _machine_line(self) -> str:
        now = machine_cpu()
        if self.machine is None or now is None or now[1] <= self.machine[1]:
            return ""
        busy = (now[0] - self.machine[0]) / (now[1] - self.machine[1])
        cores = os.cpu_count() or 1
        return (
            f" The machine's {cores} CPUs were busy {busy:.0%} of that time,"
            " all processes together."
        )

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.per_test:
            return
        table = self.table()
        terminalreporter.section("time per directory (setup + call + teardown)")
        for line in table.splitlines():
            terminalreporter.write_line(line)
        if path := os.environ.get(TIMES_ENV):
            Path(path).write_text(table)
            groups = {g: round(s, 1) for g, s in sorted(self.groups.items(), key=lambda kv: -kv[1])}
            cpu = {g: round(self.group_cpu[g], 1) for g in groups}
            Path(f"{path}.json").write_text(
                json.dumps({"groups": groups, "cpu": cpu}, indent=1) + "\n"
            )
            terminalreporter.write_line(f"(written to {path} and {path}.json)")


def register(config: pytest.Config) -> None:
    if not getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        config.pluginmanager.register(CpuMeter(), "streamflow-cpu")  # where the tests run
    if hasattr(config, "workerinput"):  # an xdist worker: the controller keeps the table
        return
    workers = getattr(config.option, "numprocesses", None) or 1
    config.pluginmanager.register(Timing(int(workers)), "streamflow-timing")
