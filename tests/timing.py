"""Where the suite's time goes: a per-directory table at the end of every run.

Every report's setup, call and teardown seconds are summed per directory under
tests/ (the first part of the path) and per parallel group (tests/tiers.py).
With pytest-xdist the reports reach the controller, so the table covers every
worker. Beside each directory's worker-seconds it shows its tests and its
slowest one; under the table, the wall time and how busy the workers were.

`STREAMFLOW_TEST_TIMES=FILE` also writes the table as Markdown to FILE, and the
groups' seconds beside it as `FILE.json`: copy that to tests/durations.json to
let the scheduler hand out the long groups first.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.tiers import TIERS

TIMES_ENV = "STREAMFLOW_TEST_TIMES"


@dataclass
class _Directory:
    seconds: float = 0.0
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

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        parts = path.split("/")
        directory = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
        entry = self.directories[directory]
        entry.seconds += report.duration
        entry.tests.add(report.nodeid)
        self.per_test[report.nodeid] += report.duration
        if self.per_test[report.nodeid] > entry.slowest[0]:
            entry.slowest = (self.per_test[report.nodeid], report.nodeid)
        group = dict(report.user_properties).get("group", path)
        self.groups[str(group)] += report.duration
        for tier in TIERS:
            if tier in report.keywords:
                self.tiers[tier].add(report.nodeid)
                self.tier_seconds[tier] += report.duration

    def table(self) -> str:
        wall = time.monotonic() - self.started
        total = sum(d.seconds for d in self.directories.values())
        lines = [
            "| directory | tests | seconds | share | slowest test (s) |",
            "|---|---:|---:|---:|---|",
        ]
        for name, entry in sorted(self.directories.items(), key=lambda kv: -kv[1].seconds):
            slow_s, slow_id = entry.slowest
            share = entry.seconds / total if total else 0.0
            lines.append(
                f"| {name} | {len(entry.tests)} | {entry.seconds:.0f} | {share:.0%} "
                f"| {slow_id.split('/', 1)[-1]} ({slow_s:.0f}) |"
            )
        lines.append(f"| **all** | {len(self.per_test)} | {total:.0f} | 100% | |")
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
        )
        return "\n".join(lines) + "\n"

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
            Path(f"{path}.json").write_text(json.dumps({"groups": groups}, indent=1) + "\n")
            terminalreporter.write_line(f"(written to {path} and {path}.json)")


def register(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller keeps the table
        return
    workers = getattr(config.option, "numprocesses", None) or 1
    config.pluginmanager.register(Timing(int(workers)), "streamflow-timing")
