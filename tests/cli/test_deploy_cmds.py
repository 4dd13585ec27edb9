"""``deploy``, ``status``, ``scale``, ``configure``, ``logs``, ``undeploy`` as a user runs them.

The console script runs in a process of its own, with ``STREAMFLOW_HOME`` in
the test's tmp dir and the session's broker as ``--bootstrap-servers``; the
supervisor daemon it starts is a real detached process. One application is
deployed for the module and the tests walk through its life in order (deploy,
scale, configure, logs, undeploy), as a user would; each test checks both what
the CLI says and what really runs (process ids from ``status.json``). Waits are
on conditions with timeouts, never sleeps.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.waiting import wait_until

STREAMFLOW = Path(sys.executable).with_name("streamflow")

SCHEMA = """\
{"type": "record", "name": "Number", "namespace": "deploytest",
 "fields": [
   {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
   {"name": "value", "type": "double"}
 ]}
"""

MODULE = '''\
"""Numbers at a steady rate, a processor that scales them, and a file they end up in."""

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet, params
from streamflow.streamlets.io import FileEgress, Generator

NUMBER = "deploytest.Number"


class Numbers(Generator):
    out = Outlet("out", NUMBER)


class Scale(Streamlet):
    inp = Inlet("in", NUMBER)
    out = Outlet("out", NUMBER)
    factor = params.Float(default=2.0, description="what each value is multiplied by")

    def process(self, record: Record) -> dict[str, Any]:
        return {"id": record.value["id"], "value": record.value["value"] * self.factor}


class NumberFile(FileEgress):
    in_ = Inlet("in", NUMBER)
'''

BLUEPRINT = """\
name: {app}
streamlets:
  numbers:
    class: pipeline:Numbers
    config: {{rate: 50, key_field: id}}
  scale:
    class: pipeline:Scale
  sink:
    class: pipeline:NumberFile
    config: {{path: out.jsonl}}
topics:
  {app}-numbers:
    producers: [numbers.out]
    consumers: [scale.in]
    partitions: 2
  {app}-scaled:
    producers: [scale.out]
    consumers: [sink.in]
"""


@dataclass
class Project:
    root: Path
    app: str

    @property
    def blueprint(self) -> Path:
        return self.root / "blueprint.yaml"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def app_dir(self) -> Path:
        return self.home / "apps" / self.app

    def cli(self, *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(STREAMFLOW), *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("STREAMFLOW_KAFKA_BOOTSTRAP", "FORCE_COLOR", "NO_COLOR")
        }
        env.update(STREAMFLOW_HOME=str(self.home), COLUMNS="250")
        return env

    def status(self) -> dict[str, Any]:
        result = self.cli("status", self.app, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def pids(self) -> dict[str, int]:
        """Replica -> pid, as the supervisor recorded them."""
        status = json.loads((self.app_dir / "status.json").read_text())
        return {r["name"]: r["pid"] for r in status["replicas"] if r["running"]}

    def daemon_pid(self) -> int | None:
        try:
            return int(json.loads((self.home / "operator" / "daemon.json").read_text())["pid"])
        except (FileNotFoundError, KeyError, ValueError):
            return None


def make_project(root: Path) -> Project:
    project = Project(root=root, app=f"deploytest-{uuid.uuid4().hex[:8]}")
    (root / "schemas").mkdir(parents=True)
    (root / "schemas" / "number.avsc").write_text(SCHEMA)
    (root / "pipeline.py").write_text(MODULE)
    project.blueprint.write_text(BLUEPRINT.format(app=project.app))
    return project


def alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (and is not a zombie waiting for its parent)."""
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def one_line(text: str) -> str:
    return " ".join(text.split())


def progress_lines(stderr: str, what: str) -> list[str]:
    """The plain progress lines of a wait (``deploying app: ... [3s]``), without their times."""
    lines = [re.sub(r" \[[0-9hms]+\]$", "", line) for line in stderr.splitlines()]
    return [line for line in lines if line.startswith(f"{what}: ") or line == f"{what}…"]


def assert_line_oriented(result: subprocess.CompletedProcess[str], what: str) -> list[str]:
    """Not on a terminal: no ANSI anywhere, and a progress line only when something changed."""
    assert "\x1b[" not in result.stdout + result.stderr
    lines = progress_lines(result.stderr, what)
    assert lines, result.stderr
    assert all(a != b for a, b in itertools.pairwise(lines)), lines
    return lines


def streamlets(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in status["streamlets"]}


def stop_leftovers(project: Project) -> None:
    """After a failed test: stop the daemon (it stops its replicas) and anything left."""
    pid = project.daemon_pid()
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not alive(pid), timeout=60, what="the daemon to stop")
    for stray in processes_mentioning(str(project.home)):
        os.kill(stray, signal.SIGKILL)


@dataclass
class Deployed:
    project: Project
    bootstrap: str
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def deployed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    project = make_project(tmp_path_factory.mktemp("deploy"))
    result = project.cli("deploy", str(project.blueprint), "-b", kafka_bootstrap)
    try:
        yield Deployed(project, kafka_bootstrap, result)
    finally:
        stop_leftovers(project)


# -- the life of one application, in order --------------------------------------------------------


def test_deploy_prints_what_it_did_and_waits_until_every_replica_is_ready(
    deployed: Deployed,
) -> None:
    project, result = deployed.project, deployed.result
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"deployed {project.app} on local:" in result.stderr
    for streamlet in ("numbers", "scale", "sink"):
        assert f"create {streamlet} with 1 replica(s)" in result.stderr
        assert re.search(rf"^{streamlet}\s+1/1\s", result.stdout, re.M), result.stdout
    assert f"{project.app} on local: Running" in result.stdout
    # not a terminal: one plain line on stderr per change, then the outcome
    lines = assert_line_oriented(result, f"deploying {project.app}")
    assert lines[0] == f"deploying {project.app}: starting the supervisor", lines
    assert re.fullmatch(r"numbers \d/1 ready.*, scale \d/1 ready.*, sink \d/1 ready.*",
                        lines[-1].partition(": ")[2]), lines  # fmt: skip
    assert re.search(rf"^deployed {project.app}: 3 replicas ready in \d+s$", result.stderr, re.M), (
        result.stderr
    )

    status = project.status()
    assert status["phase"] == "Running" and status["up_to_date"], status
    assert status["kafka"] == deployed.bootstrap
    for counts in streamlets(status).values():
        assert (counts["ready"], counts["desired"], counts["running"]) == (1, 1, 1)
    pids = project.pids()
    assert sorted(pids) == ["numbers-0", "scale-0", "sink-0"]
    assert all(alive(pid) for pid in pids.values())
    # replicas run in the blueprint's directory: the sink's relative path lands there
    wait_until(lambda: (project.root / "out.jsonl").exists(), timeout=60, what="the sink's file")

    listed = project.cli("list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {
            "name": project.app,
            "target": "local",
            "phase": "Running",
            "message": "",
            "ready": 3,
            "desired": 3,
            "streamlets": {s: {"ready": 1, "desired": 1} for s in ("numbers", "scale", "sink")},
        }
    ]
    table = project.cli("status", project.app)
    assert table.returncode == 0
    assert re.search(r"^streamlet\s+ready\s+restarts\s+lag\s+model", table.stdout, re.M)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["ghost", "2"], 1, "has no streamlet 'ghost' (its streamlets: numbers, scale, sink)"),
        (["scale", "-1"], 2, "the number of replicas of 'scale' must be 0 or more, not -1"),
        (["scale=two"], 2, "expected STREAMLET=N with N a whole number"),
        (["scale"], 2, "expected STREAMLET=N"),
    ],
)
def test_scale_rejects_a_bad_request_and_changes_nothing(
    deployed: Deployed, args: list[str], code: int, message: str
) -> None:
    project = deployed.project
    spec = (project.app_dir / "app.json").read_text()
    result = project.cli("scale", project.app, *args)
    assert result.returncode == code, result.stderr
    assert message in one_line(result.stderr)
    assert "Traceback" not in result.stderr
    assert (project.app_dir / "app.json").read_text() == spec


def test_scale_up_warns_about_idle_replicas_and_runs_the_new_count(deployed: Deployed) -> None:
    project = deployed.project
    before = project.pids()
    result = project.cli("scale", project.app, "scale", "3", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["phase"] == "Running"  # stdout: the status, nothing else
    lines = assert_line_oriented(result, f"scaling {project.app}")
    assert all(line.startswith(f"scaling {project.app}: scale 1→3: ") for line in lines), lines
    assert re.search(rf"^scaled {project.app}: 5 replicas ready in \d+s$", result.stderr, re.M)
    warning = "scale has 3 replicas but its input has 2 partition(s): 1 replica(s) will sit idle"
    assert warning in one_line(result.stderr)
    assert "scale scale from 1 to 3" in result.stderr
    scale = streamlets(project.status())["scale"]
    assert (scale["ready"], scale["desired"], scale["running"]) == (3, 3, 3)
    after = project.pids()
    assert sorted(after) == ["numbers-0", "scale-0", "scale-1", "scale-2", "sink-0"]
    assert all(alive(pid) for pid in after.values())
    assert {k: after[k] for k in before} == before  # scaling out restarts nothing

    back = project.cli("scale", project.app, "scale=1", "sink=1")
    assert back.returncode == 0, back.stderr
    assert "warning" not in back.stderr
    assert "scale scale from 3 to 1" in back.stderr
    assert project.pids() == before
    assert not alive(after["scale-1"]) and not alive(after["scale-2"])


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("scale.factor=abc", "scale.factor=abc: invalid float: expected a number, got 'abc'"),
        ("scale.nope=1", "pipeline:Scale has no config parameter 'nope' (its parameters: factor)"),
        ("ghost.factor=1", "application '{app}' has no streamlet 'ghost'"),
    ],
)
def test_configure_with_a_bad_value_says_what_is_wrong_and_changes_nothing(
    deployed: Deployed, setting: str, message: str
) -> None:
    project = deployed.project
    spec = (project.app_dir / "app.json").read_text()
    pids = project.pids()
    result = project.cli("configure", project.app, "--set", setting)
    assert result.returncode == 1, result.stderr
    output = one_line(result.stderr)
    assert "nothing was changed" in output
    assert message.format(app=project.app) in output
    assert "Traceback" not in result.stderr
    assert (project.app_dir / "app.json").read_text() == spec
    assert project.pids() == pids


def test_configure_rolls_only_the_changed_streamlet(deployed: Deployed) -> None:
    project = deployed.project
    before = project.pids()
    result = project.cli("configure", project.app, "--set", "scale.factor=3")
    assert result.returncode == 0, result.stderr
    assert "roll scale (its configuration changed)" in result.stderr
    assert "roll numbers" not in result.stderr and "roll sink" not in result.stderr
    after = project.pids()
    assert after["scale-0"] != before["scale-0"] and not alive(before["scale-0"])
    assert (after["numbers-0"], after["sink-0"]) == (before["numbers-0"], before["sink-0"])
    assert project.status()["phase"] == "Running"

    shown = project.cli("configuration", project.app, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    config = json.loads(shown.stdout)
    assert config["scale"] == {"factor": 3.0}
    assert config["numbers"]["rate"] == 50.0 and config["numbers"]["loop"] is False  # defaults
    assert config["sink"]["path"] == "out.jsonl"


def test_logs_show_each_replicas_lines(deployed: Deployed) -> None:
    project = deployed.project
    result = project.cli("logs", project.app, "scale")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("scale-0 | ") for line in lines), result.stdout
    assert any(re.match(r"scale-0 \| .*health and metrics on http://", line) for line in lines)
    assert any(re.match(r"scale-0 \| .*stopped cleanly", line) for line in lines)  # the roll
    scaled_away = project.cli("logs", project.app, "scale", "--replica", "2")
    assert scaled_away.returncode == 0 and "stopped cleanly" in scaled_away.stdout

    last = project.cli("logs", project.app, "scale", "--replica", "0", "--tail", "1")
    assert last.returncode == 0, last.stderr
    assert last.stdout.splitlines() == [lines[-1].removeprefix("scale-0 | ")]

    unknown = project.cli("logs", project.app, "ghost")
    assert unknown.returncode == 1
    assert "has no streamlet 'ghost'" in unknown.stderr

    followed = project.root / "follow.log"
    with followed.open("w") as out:
        process = subprocess.Popen(
            [str(STREAMFLOW), "logs", project.app, "numbers", "-f"],
            cwd=project.root,
            env=project.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: "health and metrics on" in followed.read_text(),
            timeout=30,
            what="logs -f to print the existing lines",
        )
        assert process.poll() is None  # still following
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0, followed.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_undeploy_stops_every_replica_keeps_the_topics_and_the_daemon_exits(
    deployed: Deployed,
) -> None:
    project = deployed.project
    pids = project.pids()
    daemon = project.daemon_pid()
    assert pids and daemon is not None and alive(daemon)
    result = project.cli("undeploy", project.app)
    assert result.returncode == 0, result.stderr
    assert f"undeployed {project.app} from local" in result.stderr
    lines = assert_line_oriented(result, f"stopping {project.app}")
    assert lines[0] == f"stopping {project.app}: 3 replicas left", lines
    assert "its topics are kept" in result.stderr
    assert not [pid for pid in pids.values() if alive(pid)]
    assert not project.app_dir.exists()
    wait_until(lambda: not alive(daemon), timeout=30, what="the daemon to exit")
    assert processes_mentioning(str(project.home)) == []

    listed = project.cli("list", "-o", "json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    gone = project.cli("status", project.app)
    assert gone.returncode == 1
    assert f"no application '{project.app}' is deployed" in one_line(gone.stderr)
    topics = AdminClient({"bootstrap.servers": deployed.bootstrap}).list_topics(timeout=10).topics
    assert f"{project.app}-numbers" in topics and f"{project.app}-scaled" in topics


# -- on its own -----------------------------------------------------------------------------------


def test_deploy_of_an_invalid_blueprint_lists_the_problems_and_starts_nothing(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path)
    text = project.blueprint.read_text().replace("class: pipeline:Scale", "class: pipeline:Scal")
    project.blueprint.write_text(text)
    result = project.cli("deploy", str(project.blueprint), "-b", "127.0.0.1:1")
    assert result.returncode == 1, result.stderr
    assert re.search(r"blueprint\.yaml:\d+:\d+: error\[[a-z-]+\]: .*Scal", result.stderr)
    assert not project.home.exists()

    bad_value = project.cli("deploy", str(project.blueprint), "--set", "numbers.rate=fast")
    assert bad_value.returncode == 1 and "fast" in bad_value.stderr
    assert not project.home.exists()


def test_the_kubernetes_target_is_chosen_with_a_flag(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    result = project.cli("status", "anything", "--target", "kubernetes", "--context", "nowhere")
    assert result.returncode == 1  # not available yet, or no such context: a clear error
    assert result.stderr.startswith("error") and "Traceback" not in result.stderr
    unknown = project.cli("status", "anything", "--target", "mars")
    assert unknown.returncode == 2


def test_deploy_without_kafka_runs_an_embedded_broker_in_the_daemon(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    try:
        result = project.cli("deploy", str(project.blueprint), "--no-wait")
        assert result.returncode == 0, result.stderr
        runtime = json.loads((project.app_dir / "runtime.json").read_text())
        assert runtime["embedded"] is True and runtime["bootstrap"].startswith("127.0.0.1:")
        assert (project.home / "kafka" / "data" / "meta.properties").exists()  # kept data
        wait_until(
            lambda: project.status()["phase"] == "Running",
            timeout=90,
            what="the app to run on the embedded broker",
        )
        daemon = project.daemon_pid()
        undeployed = project.cli("undeploy", project.app, "--delete-topics")
        assert undeployed.returncode == 0, undeployed.stderr
        assert f"{project.app}-numbers" in undeployed.stderr  # the deleted topics are named
        wait_until(lambda: not alive(daemon), timeout=60, what="the daemon to exit")
        assert processes_mentioning(str(project.home)) == []  # the broker stopped with it
    finally:
        stop_leftovers(project)
