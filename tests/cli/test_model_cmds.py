"""`streamflow model push` and `model status`, as a user runs them, against running replicas."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import kafka_support as k

STREAMFLOW = str(Path(sys.executable).with_name("streamflow"))


def _cli(*args: str, home: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STREAMFLOW_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [STREAMFLOW, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def _register(home: Path, app: Any, bootstrap: str) -> None:
    folder = home / "apps" / app.name
    folder.mkdir(parents=True)
    (folder / "app.json").write_text(json.dumps(app.to_dict()))
    (folder / "runtime.json").write_text(json.dumps({"bootstrap": bootstrap}))


def test_push_waits_for_every_replica_and_status_shows_what_serves(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels
) -> None:
    home = tmp_path / "home"
    app = k.app(kafka_bootstrap, 2, tmp_path / "cache", allow_saved_model=True)
    _register(home, app, kafka_bootstrap)
    with support.replicas(app, tmp_path) as running:
        running.start("classifier", 0)
        running.start("classifier", 1)
        first = _cli(
            "model",
            "push",
            app.name,
            "classifier",
            "--keras",
            str(wine_models.v1.keras_file),
            "--name",
            "wine",
            home=home,
        )
        assert first.returncode == 0, first.stdout + first.stderr + running.log()
        assert "pushed wine:1" in first.stdout
        assert first.stdout.count("serving") == 2  # one row per replica
        # not a terminal: a plain line on stderr per change of the count, then the outcome
        assert "\x1b[" not in first.stdout + first.stderr
        waits = [
            line.rsplit(" [", 1)[0]
            for line in first.stderr.splitlines()
            if line.startswith("waiting for classifier to serve wine:1 — ")
        ]
        assert waits[0].endswith(" — 0/2 replicas"), first.stderr
        assert waits[-1].endswith(" — 2/2 replicas"), first.stderr
        assert len(waits) == len(set(waits)), waits  # never one per poll
        assert re.search(r"^classifier serves wine:1 on 2/2 replicas in \d+s$", first.stderr, re.M)
        second = _cli(
            "model",
            "push",
            app.name,
            "classifier",
            "--saved-model",
            str(wine_models.v2.saved_model),
            "-o",
            "json",
            home=home,
        )
        assert second.returncode == 0, second.stdout + second.stderr
        assert "pushed wine:2 (TF_SAVED_MODEL" in second.stderr  # the next version, by default
        pushed = json.loads(second.stdout)  # stdout: the result alone
        assert (pushed["model"], pushed["version"], pushed["kind"]) == ("wine", 2, "TF_SAVED_MODEL")
        assert {r["state"] for r in pushed["replicas"].values()} == {"serving"}
        assert len(pushed["replicas"]) == 2
        rejected = _cli(
            "model",
            "push",
            app.name,
            "classifier",
            "--url",
            "http://192.0.2.1:8080",
            "--protocol",
            "v2",
            home=home,
        )
        assert rejected.returncode == 1
        assert "rejected" in rejected.stdout and "allowlist" in rejected.stdout
        refusal = " ".join(rejected.stderr.split())
        assert "wine:3 is not served by every replica of classifier: classifier-0 (rejected" in (
            refusal
        )
        status = _cli("model", "status", app.name, "-o", "json", home=home)
        assert status.returncode == 0, status.stderr
        rows = json.loads(status.stdout)
        assert {(r["version"], r["state"]) for r in rows} == {(2, "serving")}
        assert all("rejected" in r.get("last_event", "") for r in rows)


def test_push_usage_errors_are_clear(tmp_path: Path, kafka_bootstrap: str) -> None:
    home = tmp_path / "home"
    app = k.app(kafka_bootstrap, 1, tmp_path / "cache")
    _register(home, app, kafka_bootstrap)
    both = _cli(
        "model", "push", app.name, "classifier", "--url", "http://x", "--keras", __file__, home=home
    )
    assert both.returncode == 2 and "exactly one of" in both.stderr
    unknown = _cli("model", "push", app.name, "nope", "--url", "http://x", home=home)
    assert unknown.returncode == 1 and "has no streamlet 'nope'" in unknown.stderr
    missing = _cli("model", "push", "no-such-app", "classifier", "--url", "http://x", home=home)
    assert missing.returncode == 1 and "neither a blueprint file" in missing.stderr
    for result in (both, unknown, missing):
        assert "Traceback" not in result.stdout + result.stderr
