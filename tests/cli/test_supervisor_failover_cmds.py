"""The local supervisor is no single point of failure (issue 17, point 5).

``streamflow deploy`` as a user runs it, on the session's broker. The daemon is
killed with ``kill -9``. Before, its replicas ran on unsupervised, their lines
were lost (they were piped through the dead daemon), and the next deploy said
"nothing to change", replaced every replica and reset the restart counts. Now
the replicas write their own log files, ``status`` says nothing supervises
them, and the next deploy starts a daemon that adopts the replicas still
running (same pids), restarts the others, and keeps every restart count.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.cli.test_deploy_cmds import alive, make_project, one_line, stop_leftovers
from tests.waiting import wait_until


def _rows(app_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        status = json.loads((app_dir / "status.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {r["name"]: r for r in status["replicas"]}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_killed_supervisor_loses_no_log_and_its_successor_adopts_and_keeps_counts(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    project = make_project(tmp_path)
    try:
        first = project.cli("deploy", str(project.blueprint), "-b", kafka_bootstrap)
        assert first.returncode == 0, first.stderr
        rows = _rows(project.app_dir)
        assert set(rows) == {"numbers-0", "scale-0", "sink-0"}

        # a replica crash before the daemon dies: its count must survive the daemon
        os.kill(rows["scale-0"]["pid"], signal.SIGKILL)
        wait_until(
            lambda: (
                _rows(project.app_dir)["scale-0"]["restarts"] == 1
                and alive(_rows(project.app_dir)["scale-0"]["pid"])
            ),
            timeout=120,
            what="scale-0 restarted once",
        )
        rows = _rows(project.app_dir)
        daemon = project.daemon_pid()
        assert daemon is not None
        os.kill(daemon, signal.SIGKILL)
        wait_until(lambda: not alive(daemon), timeout=30, what="the daemon to die")

        # the replicas run on, and what they say still reaches their own files
        assert all(alive(r["pid"]) for r in rows.values())
        out = project.root / "out.jsonl"
        before = _lines(out)
        wait_until(lambda: _lines(out) > before + 20, timeout=120, what="records to flow on")
        os.kill(rows["scale-0"]["pid"], signal.SIGTERM)
        wait_until(lambda: not alive(rows["scale-0"]["pid"]), timeout=60, what="scale-0 to stop")
        log = (project.app_dir / "logs" / "scale-0.log").read_text()
        assert "received SIGTERM; finishing the current batch" in log
        assert "stopped cleanly" in log

        # nothing restarts it, and status says why
        status = project.status()
        assert status["phase"] == "Failed"
        assert "the local supervisor is not running" in status["message"]

        # the next deploy starts a daemon that takes over
        again = project.cli("deploy", str(project.blueprint), "-b", kafka_bootstrap)
        assert again.returncode == 0, again.stderr
        said = one_line(again.stdout + again.stderr)
        assert "the local supervisor was not running (killed?)" in said, said
        wait_until(
            lambda: alive(_rows(project.app_dir).get("scale-0", {}).get("pid")),
            timeout=120,
            what="scale-0 started again",
        )
        after = _rows(project.app_dir)
        for name in ("numbers-0", "sink-0"):  # adopted: the same processes
            assert after[name]["pid"] == rows[name]["pid"], name
        assert after["scale-0"]["restarts"] == 2  # one before the daemon died, one now
        daemon_log = (project.home / "operator" / "daemon.log").read_text()
        adopted = f"numbers-0 (pid {rows['numbers-0']['pid']})"
        assert "adopted the replicas a previous supervisor left running" in daemon_log
        assert adopted in daemon_log

        # an adopted replica that dies is restarted by its new supervisor
        os.kill(rows["sink-0"]["pid"], signal.SIGKILL)
        wait_until(
            lambda: (
                _rows(project.app_dir)["sink-0"]["restarts"] == 1
                and alive(_rows(project.app_dir)["sink-0"]["pid"])
            ),
            timeout=120,
            what="the adopted sink-0 restarted",
        )
        row = _rows(project.app_dir)["sink-0"]
        assert row["pid"] != rows["sink-0"]["pid"]
        assert "adopted from a previous supervisor" in row["last_exit_reason"]
        before = _lines(out)
        wait_until(lambda: _lines(out) > before + 20, timeout=120, what="records to flow again")
    finally:
        stop_leftovers(project)
