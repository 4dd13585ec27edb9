"""Programs built from source that some tests need, waited for outside the tests' timeouts.

`./dev test` starts the Go builds (the control plane, promtool, Toxiproxy) in the
background at a low priority and runs the suite meanwhile: on a fresh machine they
are most of the set-up's CPU, and the suite leaves a core idle much of the time.
A test that needs one of them first runs the tool's build script, which waits on
the lock a running build holds and returns at once when the program is up to date
(or builds it, on a checkout where nothing started a build). A background build
that a test now waits for is first set back to normal priority (where this runs
as root, as CI does): at the lowest it would starve behind the suite itself, with
the waiting workers idle. This happens before the test's own timeout starts:
pytest-timeout's clock covers fixtures, and a cold control plane takes minutes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_BUILD_TIMEOUT_S = 3600.0


# tool -> (the fixtures that mean a test needs it, the modules that start it themselves)
NEEDS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "k8s": (
        frozenset({"kube_cluster", "real_node", "kubectl"}),
        ("devkit/test_k8s_cluster.py", "devkit/test_k8s_real_node.py", "e2e/"),
    ),
    "promtool": (frozenset({"promtool"}), ("operator/test_monitoring.py",)),
    "toxiproxy": (frozenset({"toxiproxy_server"}), ()),
}
_done: dict[str, str | None] = {}  # tool -> None when built, else why not
TOOLS = pytest.StashKey[list[str]]()  # on each item: the tools it needs


def needed(relative: str, fixtures: set[str]) -> list[str]:
    """The tools a test in module `relative` (under tests/) that uses `fixtures` needs."""
    return [
        tool
        for tool, (uses, modules) in NEEDS.items()
        if fixtures & uses or relative.startswith(modules)
    ]


def ensure(tool: str) -> str | None:
    """Wait for (or run) `tools/TOOL/build` once per process; None when the tool is there."""
    if tool not in _done:
        script = ROOT / "tools" / tool / "build"
        _promote(ROOT / "tools" / tool / ".build.pid")
        try:
            result = subprocess.run(
                [str(script)],
                capture_output=True,
                text=True,
                timeout=_BUILD_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            _done[tool] = f"{script} took over {_BUILD_TIMEOUT_S:.0f} s"
        else:
            failed = result.returncode != 0
            _done[tool] = f"{script} failed:\n{result.stderr[-4000:]}" if failed else None
    return _done[tool]


def _promote(pid_file: Path) -> None:
    """The build whose pid the file holds, and everything it started, at niceness 0."""
    if os.geteuid() != 0:  # only root may lower a niceness
        return
    try:
        build = int(pid_file.read_text())
        if b"build" not in Path(f"/proc/{build}/cmdline").read_bytes():
            return  # that build ended, and its pid is another program's now
    except (OSError, ValueError):
        return
    for pid in _family(build):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, 0)


def _family(root: int) -> list[int]:
    """`root` and its descendants, from /proc (Go's compilers inherit the niceness of
    `go build`, so setting it covers those started later too)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    family, queue = [], [root]
    while queue:
        pid = queue.pop()
        family.append(pid)
        queue.extend(children.get(pid, []))
    return family


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> object:
    for tool in item.stash.get(TOOLS, ()):
        if (why := ensure(tool)) is not None:
            item.add_report_section("setup", f"build of {tool}", why)
    return (yield)
