"""The rollout example as the README runs it: `streamflow run blueprints/wine/rollout.yaml`.

A user's second terminal starts two rollouts with `streamflow model rollout start`:
version 3 of train.py (worse on purpose) is rolled back by the application's controller
while it is still a shadow, with no record served by it; version 2 is walked through the
policy given with `--policy` and promoted, though the controller, the evidence and a
classifier replica are killed (-9) halfway. Labels arrive 50 wines after their
predictions. `streamflow ui` shows the rollout in Chromium. Throughout, the classifier
runs exactly-once: every wine written is predicted once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from playwright.sync_api import Browser, expect

from tests.model_fixtures import WineModels
from tests.running import CliRun
from tests.waiting import wait_until
from tests.web.test_ui_browser import Deployed, browser, screenshot, ui

__all__ = ["browser"]  # a fixture, shared with the web view's own browser tests

pytestmark = pytest.mark.timeout(600)  # two rollouts, three kills and a browser on 2 cores

ROOT = Path(__file__).resolve().parents[2]
BLUEPRINT = ROOT / "blueprints" / "wine" / "rollout.yaml"
STREAMFLOW = Path(sys.executable).with_name("streamflow")
APP = "wine-rollout"

POLICY = """\
# shadow first, then half of the keys; promoted once surely no worse than 5 points below
steps:
  - {mode: shadow, windows: 1, min_labels: 50}
  - {mode: canary, share: 50, windows: 2, min_labels: 50}
margin: 0.05
max_drop: 0.05
max_labels: 3000
"""


def _env(home: Path) -> dict[str, str]:
    drop = ("STREAMFLOW_KAFKA_BOOTSTRAP", "STREAMFLOW_SCHEMA_REGISTRY_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(STREAMFLOW_HOME=str(home), NO_COLOR="1", COLUMNS="250", TF_CPP_MIN_LOG_LEVEL="2")
    return env


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(STREAMFLOW), *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _status(env: dict[str, str]) -> dict[str, Any]:
    out = _cli(env, "model", "rollout", "status", APP, "classifier", "-o", "json")
    return json.loads(out)  # type: ignore[no-any-return]


def _keys(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    """(key, the streamflow-model header) of the committed records of ``topic``, up to
    where it ends now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rollout-test-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = [
            TopicPartition(topic, p)
            for p in consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, 30)[1] for tp in partitions}
        consumer.assign([TopicPartition(topic, tp.partition, 0) for tp in partitions])
        found: list[tuple[str, str]] = []

        def behind() -> bool:  # a transaction's marker takes an offset: positions, not messages
            return any(
                ends[tp.partition] > 0 and tp.offset < ends[tp.partition]
                for tp in consumer.position(partitions)
            )

        while behind():
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None and msg.offset() < ends[msg.partition()]:
                    model = dict(msg.headers() or []).get("streamflow-model", b"")
                    found.append((msg.key().decode(), model.decode()))
        return found
    finally:
        consumer.close()


def _replica_pid(home: Path, streamlet: str, replica: int) -> int:
    """The pid of a replica `streamflow run` started for this test's home."""
    wanted = [
        b"--streamlet",
        streamlet.encode(),
        b"--replica",
        str(replica).encode(),
    ]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        joined = b"\0".join(args)
        if str(home).encode() in joined and b"\0".join(wanted) in joined:
            return int(entry.name)
    raise AssertionError(f"no process runs {streamlet}-{replica}")


def test_a_worse_candidate_is_rolled_back_and_a_good_one_promoted_by_the_app_itself(
    wine_models: WineModels, tmp_path: Path, browser: Browser
) -> None:
    home, log = tmp_path / "home", tmp_path / "run.log"
    env = _env(home)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    run = CliRun(
        [
            "run", str(BLUEPRINT),
            "--set", f"samples.dataset={wine_models.samples}",
            "--set", f"models.keras={wine_models.v1.keras_file}",
            "--set", "samples.rate=100",
        ],
        env=env, log_file=log,
    )  # fmt: skip
    watcher: subprocess.Popen[str] | None = None
    try:
        run.wait(
            lambda text: text.count("stable model wine:1 serving") >= 2,
            what="both classifier replicas serving wine:1",
            timeout=240,
        )
        # a worse candidate (v3), started where the blueprint's policy starts (a shadow):
        # rolled back by evidence before it serves a record
        _cli(env, "model", "rollout", "start", APP, "classifier",
             "--keras", str(wine_models[3].keras_file), "-q")  # fmt: skip
        run.wait(
            lambda text: (
                "rollout of wine:2 (stable 1), step 1 of 3 (shadow 100%): ROLLBACK" in text
            ),
            what="the controller rolling wine:2 back",
            timeout=180,
        )
        wait_until(
            lambda: _status(env)["candidate"] is None,
            what="the rollback reaching the control topic",
            timeout=60,
        )
        now = _status(env)
        assert now["stable"] == 1
        last = now["decisions"][-1]
        assert (last["candidate_version"], last["verdict"]) == (2, "ROLLBACK")
        assert "less accurate by more than 5.0%" in last["reason"], last
        assert last["interval_high"] < -0.05 and last["candidate"]["labelled"] > 0
        assert [d["sequence"] for d in now["decisions"]] == list(
            range(1, len(now["decisions"]) + 1)
        )

        # a good one (v2), with its own policy: walked through its steps, then promoted,
        # though the controller, the evidence and a classifier replica are killed (-9)
        # once the first step is done: each goes on from its changelog, nothing twice
        _cli(env, "model", "rollout", "start", APP, "classifier",
             "--keras", str(wine_models.v2.keras_file), "--policy", str(policy), "-q")  # fmt: skip
        # a second terminal follows it: each decision as it is made, until the end
        watcher = subprocess.Popen(
            [str(STREAMFLOW), "model", "rollout", "status", APP, "classifier",
             "--watch", "--timeout", "400"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        run.wait(
            lambda text: "rollout of wine:3 (stable 1), step 1 of 2 (shadow 100%): ADVANCE" in text,
            what="the controller advancing wine:3 past its shadow",
            timeout=240,
        )
        for streamlet, replica in (("controller", 0), ("evidence", 0), ("classifier", 0)):
            os.kill(_replica_pid(home, streamlet, replica), signal.SIGKILL)
        run.wait(
            lambda text: all(
                f"{name}-0 exited with signal SIGKILL" in text
                for name in ("controller", "evidence", "classifier")
            ),
            what="the supervisor seeing the three killed",
            timeout=60,
        )
        run.wait(
            lambda text: "rollout of wine:3 (stable 1), step 2 of 2 (canary 50%): PROMOTE" in text,
            what="the controller promoting wine:3",
            timeout=240,
        )
        wait_until(
            lambda: _status(env)["stable"] == 3, what="wine:3 stable on the topic", timeout=60
        )
        decisions = [d for d in _status(env)["decisions"] if d["candidate_version"] == 3]
        verdicts = [d["verdict"] for d in decisions]
        assert verdicts[-1] == "PROMOTE" and "ADVANCE" in verdicts and "ROLLBACK" not in verdicts
        # decided once each, across the kills: one advance, one promotion, numbered in turn
        logged = run.log()
        for verdict in ("ADVANCE", "PROMOTE"):
            said = rf"rollout of wine:3 \(stable 1\), step \d of 2 \([a-z]+ [\d.]+%\): {verdict}:"
            assert len(re.findall(said, logged)) == 1, verdict
        assert verdicts.count("ADVANCE") == 1 and verdicts.count("PROMOTE") == 1, verdicts
        assert [d["sequence"] for d in decisions] == list(range(1, len(decisions) + 1))
        watched, _ = watcher.communicate(timeout=120)
        assert watcher.returncode == 0, watched
        lines = [line for line in watched.splitlines() if "last decision on wine:3" in line]
        assert "PROMOTE at step 2 of 2" in lines[-1], watched
        assert any("ADVANCE at step 1 of 2" in line for line in lines), watched
        table = _cli(env, "model", "status", APP)
        assert "classifier: last decision on wine:3: PROMOTE at step 2 of 2 (canary)" in table
        advance = verdicts.index("ADVANCE")
        assert {d["step"] for d in decisions[: advance + 1]} == {1}
        assert {d["step"] for d in decisions[advance + 1 :]} == {2}
        assert decisions[-1]["interval_low"] > -0.05

        # the web view: the rollout, both versions' evidence and the decisions, on the page
        with ui(Deployed(tmp_path, APP, {})) as url:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            expect(page.get_by_test_id("rollout-verdict")).to_have_attribute(
                "data-verdict", "promote", timeout=60_000
            )
            expect(page.get_by_test_id("rollout-split")).to_contain_text(
                "stable wine:1, candidate wine:3"
            )
            shown = page.get_by_test_id("rollout-decision")
            expect(shown.first).to_contain_text("promote")
            assert shown.count() == min(len(decisions), 12), (shown.count(), len(decisions))
            screenshot(page, "ui-rollout.png", tmp_path)
            page.close()

        # exactly-once: every wine written so far is predicted once, and none by wine:2
        runtime = json.loads((home / "apps" / APP / "runtime.json").read_text())
        bootstrap = runtime["bootstrap"]
        written = _keys(bootstrap, "wine-features")
        wanted = {key for key, _ in written}
        predicted: list[tuple[str, str]] = []

        def all_predicted() -> bool:
            predicted[:] = _keys(bootstrap, "wine-predictions")
            return wanted <= {key for key, _ in predicted}

        wait_until(all_predicted, what="a prediction of every wine written", timeout=120)
        mine = [(key, model) for key, model in predicted if key in wanted]
        twice = [key for key, n in Counter(key for key, _ in mine).items() if n > 1]
        assert not twice, twice[:10]
        by = Counter(model for _, model in mine)
        assert by["wine:2"] == 0 and by["wine:1"] > 0 and by["wine:3"] > 0, by
        text = run.interrupt(timeout=90)
    finally:
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
        run.close()
    assert "replica failed" not in text and "Traceback" not in text, text[-5000:]


def test_the_rollout_blueprint_verifies_and_its_evidence_runs_as_one_replica(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from streamflow.cli.main import app

    result = CliRunner().invoke(app, ["verify", str(BLUEPRINT)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "✓ wine-rollout: 6 streamlets, 8 topics, 0 problems"
    scaled = tmp_path / "rollout.yaml"
    text = (
        BLUEPRINT.read_text()
        .replace(
            "class: rollout_app:WineEvidence\n",
            "class: rollout_app:WineEvidence\n    replicas: 2\n",
        )
        .replace("name: wine-rollout\n", f"name: wine-rollout\nschemas: [{ROOT / 'schemas'}]\n")
    )
    scaled.write_text(text)
    for name in ("rollout_app.py", "classifier_app.py"):
        (tmp_path / name).write_text((BLUEPRINT.parent / name).read_text())
    result = CliRunner().invoke(app, ["verify", str(scaled)])
    assert result.exit_code != 0 and result.output.count("error[") == 1, result.output
    assert "streamlet evidence (rollout_app:WineEvidence) runs as at most 1 replica, not 2" in (
        result.output
    ), result.output
    line = text.splitlines().index("    class: rollout_app:WineEvidence") + 2  # the next line
    assert f"rollout.yaml:{line}:" in result.output, result.output
