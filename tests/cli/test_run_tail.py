"""``streamflow run`` and ``streamflow tail`` as a user runs them: the console script, in a process.

Each test writes a small project into its tmp dir (a schema, a module with a
generator, a processor and a file egress, and a blueprint) whose application
and topic names carry a fresh suffix, so consumer groups and dead-letter
topics never meet those of another test. ``STREAMFLOW_HOME`` points into the
tmp dir too. Runs wait on conditions (the output file, the process), never on
sleeps; output goes to files, so a chatty run can never block on a full pipe.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streamflow import devkit
from streamflow.operator.local.logfiles import last_lines
from streamflow.schema import SchemaStore, SingleObjectCodec
from streamflow.streamlets.io import Synthesiser
from tests import stopping
from tests.runtime.support import ERROR_HEADERS
from tests.waiting import exited, wait_until

STREAMFLOW = Path(sys.executable).with_name("streamflow")
N = 40
SEED = 3
ANSI = re.compile(r"\x1b\[[0-9;]*m")

SCHEMA = """\
{"type": "record", "name": "Number", "namespace": "clitest",
 "fields": [
   {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
   {"name": "value", "type": "double"}
 ]}
"""

MODULE = '''\
"""A generator of numbers, a processor that scales them, and a file they end up in."""

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet, params
from streamflow.streamlets.io import FileEgress, Generator

NUMBER = "clitest.Number"


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
    config: {{count: {count}, key_field: id, seed: {seed}}}
  scale:
    class: pipeline:Scale
  sink:
    class: pipeline:NumberFile
    config: {{path: '{out}'}}
topics:
  {numbers}:
    producers: [numbers.out]
    consumers: [scale.in]
  {scaled}:
    producers: [scale.out]
    consumers: [sink.in]
"""


@dataclass
class Project:
    """A blueprint in a directory of its own, with everything it needs next to it."""

    root: Path
    app: str
    numbers: str
    scaled: str
    count: int

    @property
    def blueprint(self) -> Path:
        return self.root / "blueprint.yaml"

    @property
    def out(self) -> Path:
        return self.root / "out.jsonl"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        """TMPDIR of the runs: an embedded broker's work dir lands here."""
        return self.root / "tmp"

    def dlq(self, streamlet: str) -> str:
        return f"{self.app}.{streamlet}.dlq"

    def store(self) -> SchemaStore:
        return SchemaStore([self.root / "schemas"])

    def expected_values(self) -> dict[str, float]:
        """id -> value of what the generator synthesises (the same seed, the same records)."""
        records = Synthesiser(self.store().get("clitest.Number"), seed=SEED).records(
            count=self.count
        )
        return {str(r["id"]): r["value"] for r in records}

    def written(self) -> list[dict[str, object]]:
        """The complete lines of the output file so far."""
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.split("\n")[:-1] if line]

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("STREAMFLOW_KAFKA_BOOTSTRAP", "FORCE_COLOR", "NO_COLOR")
        }
        env.update(STREAMFLOW_HOME=str(self.home), TMPDIR=str(self.tmp), COLUMNS="250")
        env.update(extra)
        return env

    def cli(self, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(STREAMFLOW), *args],
            cwd=self.root,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def files_to_explain_a_stall(self) -> str:
        """The replicas' own log files and an embedded broker's log, each's last lines."""
        files = sorted((self.home / "apps" / self.app / "logs").glob("*.log"))
        files += sorted(self.tmp.glob("streamflow-kafka-*/broker.log"))
        return "".join(
            f"\n--- the last lines of {path.name}:\n" + "\n".join(last_lines(path, 40))
            for path in files
        )

    def replica_pids(self) -> list[int]:
        runtime = json.loads((self.home / "apps" / self.app / "runtime.json").read_text())
        return [r["pid"] for r in runtime["replicas"]]


def make_project(root: Path, *, count: int = N) -> Project:
    suffix = uuid.uuid4().hex[:8]
    project = Project(
        root=root,
        app=f"clitest-{suffix}",
        numbers=f"numbers-{suffix}",
        scaled=f"scaled-{suffix}",
        count=count,
    )
    (root / "schemas").mkdir(parents=True)
    (root / "schemas" / "number.avsc").write_text(SCHEMA)
    (root / "pipeline.py").write_text(MODULE)
    project.tmp.mkdir()
    project.blueprint.write_text(
        BLUEPRINT.format(
            app=project.app,
            count=count,
            seed=SEED,
            out=project.out,
            numbers=project.numbers,
            scaled=project.scaled,
        )
    )
    return project


def alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` still runs a process whose command line holds ``marker``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in cmdline


def processes_mentioning(marker: str) -> list[str]:
    """Command lines of every process that mentions ``marker`` (a unique directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


# -- one run of the pipeline, shared by the run and tail tests --------------------------------


@dataclass
class FinishedRun:
    project: Project
    bootstrap: str
    result: subprocess.CompletedProcess[str]
    seconds: float
    garbage: dict[str, bytes]

    @property
    def log(self) -> str:
        return ANSI.sub("", self.result.stderr + self.result.stdout)


@pytest.fixture(scope="module")
def finished_run(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FinishedRun]:
    """``streamflow run --for 20s`` of a project, with undecodable records waiting for it."""
    project = make_project(tmp_path_factory.mktemp("run"))
    garbage = _undecodable(project)
    devkit.create_topic(bootstrap_servers=kafka_bootstrap, name=project.numbers)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, value in garbage.items():
        producer.produce(project.numbers, value, key.encode())
    assert producer.flush(30) == 0
    started = time.monotonic()
    result = project.cli(
        "run", str(project.blueprint), "-b", kafka_bootstrap, "--for", "20s",
        timeout=90, FORCE_COLOR="1",
    )  # fmt: skip
    yield FinishedRun(project, kafka_bootstrap, result, time.monotonic() - started, garbage)


def _undecodable(project: Project) -> dict[str, bytes]:
    """Values the processor cannot decode: no single-object marker, or a body cut short."""
    schema = project.store().get("clitest.Number")
    header = SingleObjectCodec(schema, store=project.store()).encode(
        {"id": str(uuid.uuid4()), "value": 1.0}
    )[:10]
    values = {f"junk-{i}": f"not avro {i}".encode() for i in range(4)}
    values |= {f"junk-{i}": header + b"\xff" for i in (4, 5)}  # a string length, then nothing
    return values


def test_run_for_prints_the_start_panel_runs_the_pipeline_and_stops(
    finished_run: FinishedRun,
) -> None:
    run, project = finished_run, finished_run.project
    log = run.log
    assert run.result.returncode == 0, log
    assert 20 <= run.seconds < 60, log
    # the start panel: graph, topics, Kafka, metrics
    assert f"streamflow run: {project.app}" in log
    assert "numbers.out" in log and "scale.in" in log and "sink.in" in log
    assert project.numbers in log and project.scaled in log
    assert f"Kafka: {run.bootstrap}" in log
    for replica in ("numbers-0", "scale-0", "sink-0"):
        assert re.search(rf"{replica}\s+http://127\.0\.0\.1:\d+/metrics", log), log
    # every record, once, scaled by the default factor
    expected = project.expected_values()
    written = project.written()
    assert len(written) == N, log
    assert {r["id"]: r["value"] for r in written} == {k: v * 2.0 for k, v in expected.items()}
    # replica log lines carry their replica's name, each streamlet in a colour of its own
    colours: dict[str, set[str]] = {}
    for match in re.finditer(
        r"\x1b\[([0-9;]+)m((?:numbers|scale|sink)-0)\s*\| ", run.result.stderr
    ):
        colours.setdefault(match.group(2), set()).add(match.group(1))
    assert set(colours) == {"numbers-0", "scale-0", "sink-0"}, run.result.stderr[-3000:]
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len(set.union(*colours.values())) == 3, colours
    assert re.search(r"^scale-0\s*\| .*stopped cleanly", log, re.M), log
    assert log.rstrip().endswith("streamflow: stopped"), log[-2000:]
    assert not [pid for pid in project.replica_pids() if alive(pid, "streamlet")]


def run_until_written_then_ctrl_c(
    project: Project,
    *args: str,
    as_background_job: bool = False,
    before_ctrl_c: Callable[[subprocess.Popen[bytes], Path], None] | None = None,
) -> tuple[str, list[int]]:
    """``streamflow run`` until every record is in the file, then Ctrl-C; its output and pids.

    Checks on the way that the replicas were running before the SIGINT, and that
    the run exited 0 after it. ``as_background_job`` starts it as ``sh`` starts
    ``streamflow run ... &`` in a script: with SIGINT ignored, which a process
    inherits unless it sets its own handler.
    """
    log = project.root / "run.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(STREAMFLOW), "run", str(project.blueprint), *args],
            cwd=project.root,
            env=project.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_ignore_sigint if as_background_job else None,
        )
    try:
        wait_until(
            lambda: len(project.written()) >= project.count,
            what=f"{project.count} records in the file",
            timeout=40,
            gave_up=exited(process, "streamflow"),
            explain=lambda: log.read_text() + project.files_to_explain_a_stall(),
        )
        pids = project.replica_pids()
        assert len(pids) == 3 and all(alive(pid, "streamlet") for pid in pids)
        check_a_foreground_run_is_readable_not_changeable(project)
        if before_ctrl_c is not None:
            before_ctrl_c(process, log)
        process.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal does
        assert process.wait(40) == 0, log.read_text()
    finally:
        stopping.stop(process)  # after a failed assertion: its replicas too
    return ANSI.sub("", log.read_text()), pids


def _stacks_on_sigusr1(process: subprocess.Popen[bytes], log: Path) -> None:
    """`kill -USR1` prints where each thread of the run is, and the run goes on."""
    process.send_signal(signal.SIGUSR1)
    wait_until(
        lambda: "in _supervise" in log.read_text(),
        what="the main thread's stack, in the supervision loop",
        timeout=20,
        gave_up=exited(process, "streamflow"),
        explain=log.read_text,
    )
    assert "most recent call first" in log.read_text()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def check_a_foreground_run_is_readable_not_changeable(project: Project) -> None:
    """``status`` and ``list`` (and so the web view) see a run; ``scale`` refuses to touch it."""
    status = project.cli("status", project.app, "-o", "json")
    assert status.returncode == 0, status.stderr
    found = json.loads(status.stdout)
    assert found["name"] == project.app and found["target"] == "local"
    assert {s["name"] for s in found["streamlets"]} == {"numbers", "scale", "sink"}
    assert "supervisor is not running" not in found["message"], found
    listed = project.cli("list", "-o", "json")
    assert project.app in [a["name"] for a in json.loads(listed.stdout)], listed.stdout
    scaled = project.cli("scale", project.app, "scale", "2")
    assert scaled.returncode == 1, scaled.stdout + scaled.stderr
    assert "runs in the foreground" in scaled.stderr, scaled.stderr
    assert "takes no changes" in scaled.stderr, scaled.stderr


def test_run_with_set_then_ctrl_c_stops_everything_cleanly(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    project = make_project(tmp_path, count=20)
    output, pids = run_until_written_then_ctrl_c(
        project, "-b", kafka_bootstrap, "--set", "scale.factor=-1.5"
    )
    assert "stopping replicas" in output and output.rstrip().endswith("streamflow: stopped")
    assert not [pid for pid in pids if alive(pid, "streamlet")], output
    expected = project.expected_values()
    written = project.written()
    assert len(written) == 20, output
    assert {r["id"]: r["value"] for r in written} == {k: v * -1.5 for k, v in expected.items()}


def test_run_starts_an_embedded_broker_when_given_no_kafka_and_stops_it(tmp_path: Path) -> None:
    """Also started as a script's background job, which ignores SIGINT until it says otherwise."""
    project = make_project(tmp_path, count=10)
    # no -b, no $STREAMFLOW_KAFKA_BOOTSTRAP
    output, pids = run_until_written_then_ctrl_c(
        project, as_background_job=True, before_ctrl_c=_stacks_on_sigusr1
    )
    ready = re.search(r"embedded Kafka ready at (127\.0\.0\.1:(\d+))", output)
    assert ready, output
    assert f"Kafka: {ready.group(1)}" in output
    assert "stopping the embedded broker" in output
    assert output.rstrip().endswith("streamflow: stopped")
    assert len(project.written()) == 10, output
    # the broker is gone: no process of its work dir (under TMPDIR), the dir removed, the port
    # shut; and no replica either (their command lines name the app spec under STREAMFLOW_HOME)
    assert processes_mentioning(str(project.tmp)) == []
    assert processes_mentioning(str(project.root)) == []
    assert list(project.tmp.glob("streamflow-kafka-*")) == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(ready.group(2))), timeout=2).close()
    assert not [pid for pid in pids if alive(pid, "streamlet")]


def test_run_of_an_invalid_blueprint_lists_the_problems_and_starts_nothing(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path)
    bad = project.root / "bad.yaml"
    bad.write_text(
        f"name: {project.app}\n"
        "streamlets:\n"
        "  numbers:\n"
        "    class: pipeline:Numbrs\n"
        "  scale:\n"
        "    class: pipeline:Scale\n"
        "    config: {factor: lots}\n"
        "topics:\n"
        "  t1:\n"
        "    producers: [numbers.out]\n"
        "    consumers: [scale.inlet]\n"
    )
    result = project.cli("run", str(bad), "--for", "5s", timeout=60)  # no Kafka given either
    output = result.stderr + result.stdout
    assert result.returncode == 1, output
    assert re.search(r"bad\.yaml:4:\d+: error\[[a-z-]+\]: .*Numbrs", output), output
    assert re.search(r"bad\.yaml:7:\d+: error\[[a-z-]+\]: .*lots", output), output
    assert re.search(r"bad\.yaml:11:\d+: error\[[a-z-]+\]: .*inlet", output), output
    assert "Traceback" not in output
    assert "embedded" not in output and "streamflow run:" not in output
    assert not project.home.exists() and list(project.tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--set", "scale.factor"], 1, "expected streamlet.param=value"),
        (["--set", "scale.nope=1"], 1, "has no config parameter 'nope'"),
        (["--set", "scale.factor=abc"], 1, "expected a number, got 'abc'"),
        (["--set", "ghost.factor=1"], 1, "no streamlet 'ghost'"),
        (["--for", "soon"], 2, "expected a duration"),
    ],
)
def test_run_with_a_bad_setting_says_what_is_wrong(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    project = make_project(tmp_path)
    result = project.cli("run", str(project.blueprint), *args, timeout=60)
    output = " ".join((result.stderr + result.stdout).split())  # unwrapped
    assert result.returncode == code, output
    assert message in output
    assert "Traceback" not in output
    assert not project.home.exists() and list(project.tmp.iterdir()) == []


# -- tail ------------------------------------------------------------------------------------

RECORD_LINE = re.compile(r"^(\d+)@(\d+) key=(\S+) (.*)$")


def _tail(run: FinishedRun, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert run.result.returncode == 0, f"the run that fills the topics failed:\n{run.log}"
    return run.project.cli("tail", str(run.project.blueprint), topic, "-b", run.bootstrap, *args)


def test_tail_prints_the_last_records_decoded(finished_run: FinishedRun) -> None:
    run, project = finished_run, finished_run.project
    result = _tail(run, project.scaled, "-n", "5")
    assert result.returncode == 0, result.stderr
    lines = [RECORD_LINE.match(line) for line in result.stdout.splitlines()]
    assert all(lines) and len(lines) == 5, result.stdout
    written = {r["id"]: r["value"] for r in project.written()}
    offsets = []
    for match in lines:
        assert match is not None
        offsets.append(int(match.group(2)))
        value = json.loads(match.group(4))
        assert value["id"] == match.group(3)  # the key is the id, kept through the processor
        assert value["value"] == written[value["id"]]
    assert offsets == list(range(N - 5, N))


def test_tail_as_json_has_keys_headers_and_values(finished_run: FinishedRun) -> None:
    run, project = finished_run, finished_run.project
    result = _tail(run, project.scaled, "-n", "5", "-o", "json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["offset"] for r in records] == list(range(N - 5, N))
    written = {r["id"]: r["value"] for r in project.written()}
    for record in records:
        assert record["schema"] == "clitest.Number"
        assert record["headers"] == {"streamflow-schema": "clitest.Number"}
        assert record["key"] == record["value"]["id"]
        assert record["value"]["value"] == written[record["key"]]
        assert "raw" not in record


def test_tail_shows_dead_letters_as_raw_bytes_with_the_error_headers(
    finished_run: FinishedRun,
) -> None:
    run, project = finished_run, finished_run.project
    dlq = project.dlq("scale")
    last_five = [f"junk-{i}" for i in range(1, 6)]

    text = _tail(run, dlq, "-n", "5")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    records = [m for line in lines if (m := RECORD_LINE.match(line))]
    assert [m.group(3) for m in records] == last_five, text.stdout
    assert all(m.group(4).startswith("<undecodable: ") for m in records), text.stdout
    assert "b'not avro 1'" in text.stdout and "b'\\xc3\\x01" in text.stdout
    headers = [line for line in lines if line.startswith("    headers: ")]
    assert len(headers) == 5
    assert all(name in line for line in headers for name in ERROR_HEADERS)
    assert "'streamflow-error-type': 'DecodeError'" in headers[0]
    assert f"'streamflow-source-topic': '{project.numbers}'" in headers[0]

    as_json = _tail(run, dlq, "-n", "5", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    letters = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["key"] for r in letters] == last_five
    for letter in letters:
        assert letter["value"] is None and letter["decode_error"]
        assert base64.b64decode(letter["raw"]) == run.garbage[letter["key"]]
        assert set(ERROR_HEADERS) <= set(letter["headers"])
        assert letter["headers"]["streamflow-source-topic"] == project.numbers
    # the two with a valid marker are recognised by their fingerprint, then fail to decode
    assert [r["schema"] for r in letters[-2:]] == ["clitest.Number", "clitest.Number"]


def test_tail_of_an_unknown_topic_lists_the_topics(finished_run: FinishedRun) -> None:
    run, project = finished_run, finished_run.project
    result = _tail(run, "no-such-topic")
    output = " ".join(result.stderr.split())
    assert result.returncode == 1, output
    assert f"application '{project.app}' has no topic 'no-such-topic'" in output
    for topic in (project.numbers, project.scaled, project.dlq("numbers"), project.dlq("scale")):
        assert topic in output
    assert result.stdout == ""
