"""The example blueprints as a user meets them: the console script verifies and runs them.

Each run is `streamflow run` in a process of its own, with its own embedded
broker (so the examples' fixed topic names never meet another run's) and its
own STREAMFLOW_HOME; the models come from the session's fixtures through
`--set`, exactly as a user would point a blueprint at other artifacts. What is
checked is what the user sees: the accuracy logger's lines, the drift alerts,
the explanations, and `streamflow model push` switching the model live.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamflow import devkit
from streamflow.blueprint import verify_file
from streamflow.models import locations
from tests.examples.example_models import DIGITS, REVIEWS, DigitsModels, ReviewsModel
from tests.running import CliRun

STREAMFLOW = Path(sys.executable).with_name("streamflow")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BLUEPRINTS = [
    DIGITS / "classifier.yaml",
    DIGITS / "classifier-bytes.yaml",
    DIGITS / "monitored.yaml",
    REVIEWS / "classifier.yaml",
]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMFLOW_KAFKA_BOOTSTRAP",)}
    env.update(
        STREAMFLOW_HOME=str(tmp_path / "home"),
        NO_COLOR="1",
        COLUMNS="250",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    return env


def _cli(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STREAMFLOW), *args],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _accuracy(log: str, tag: str) -> tuple[float, int]:
    """The last running accuracy the logger printed for a model tag, and over how many."""
    found = re.findall(rf"accuracy: .*?{re.escape(tag)} ([\d.]+)% of (\d+)", log)
    assert found, f"no accuracy line for {tag}:\n{log[-4000:]}"
    percent, count = found[-1]
    return float(percent), int(count)


def _served(log: str, tag: str, *, at_least: int = 100) -> bool:
    """Whether the accuracy logger has counted `at_least` predictions by a model tag."""
    counts = re.findall(rf"accuracy: .*?{re.escape(tag)} [\d.]+% of (\d+)", log)
    return bool(counts) and int(counts[-1]) >= at_least


def _clean(log: str) -> None:
    assert "replica failed" not in log and "exited with code" not in log, log[-6000:]
    assert log.rstrip().endswith("streamflow: stopped"), log[-3000:]


@pytest.mark.parametrize("blueprint", BLUEPRINTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_blueprint_verifies(blueprint: Path, tmp_path: Path) -> None:
    result = _cli(tmp_path, "verify", str(blueprint), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^✓ [\w-]+: \d+ streamlets, \d+ topics, 0 problems$", result.stdout, re.M)


def test_every_example_blueprint_verifies_without_a_warning() -> None:
    """Examples are what users copy: their allowlists name exact origins, ending at '/'."""
    examples = sorted((DIGITS.parent).glob("*/*.yaml"))
    allowlists = 0
    for blueprint in examples:
        result = verify_file(blueprint, require_registry=False)  # registry.yaml starts its own
        assert result.problems == [], (blueprint, [str(p) for p in result.problems])
        assert result.application is not None
        for streamlet in result.application.streamlets.values():
            for entry in streamlet.config.get("allowlist") or []:
                allowlists += 1
                assert locations.loose(entry) == (), (blueprint, entry)
    assert len(examples) >= 9 and allowlists >= 10


def _run(tmp_path: Path, *args: str) -> CliRun:
    return CliRun(["run", *args], env=_env(tmp_path), log_file=tmp_path / "run.log")


@pytest.mark.parametrize(
    ("blueprint", "dataset"),
    [
        ("classifier.yaml", "digits-sample.jsonl"),
        ("classifier-bytes.yaml", "digits-sample-bytes.jsonl"),
    ],
)
def test_the_digits_classifier_runs_on_each_input_form(
    digits_models: DigitsModels, tmp_path: Path, blueprint: str, dataset: str
) -> None:
    labelled = re.compile(r"-> \d \[\d:[\d.]+ \d:[\d.]+ \d:[\d.]+\] by digits:1")
    with _run(
        tmp_path, str(DIGITS / blueprint),
        "--set", f"samples.dataset={digits_models.dir / dataset}",
        "--set", f"models.keras={digits_models.keras_files[1]}",
    ) as run:  # fmt: skip
        run.wait(
            lambda log: _served(log, "digits:1", at_least=200) and labelled.search(log),
            what="200 predictions by digits:1, and a labelled one",
            timeout=240,
        )
        log = run.interrupt()
    _clean(log)
    percent, count = _accuracy(log, "digits:1")
    assert count >= 200 and percent > 90.0, log[-3000:]


def test_the_reviews_classifier_labels_raw_text(
    reviews_model: ReviewsModel, tmp_path: Path
) -> None:
    labelled = re.compile(r"review-\d+ '.+' -> (negative|positive) \(p=")
    with _run(
        tmp_path, str(REVIEWS / "classifier.yaml"),
        "--set", f"samples.dataset={reviews_model.samples}",
        "--set", f"models.keras={reviews_model.keras_file}",
    ) as run:  # fmt: skip
        run.wait(
            lambda log: _served(log, "reviews:1", at_least=200) and labelled.search(log),
            what="200 predictions by reviews:1, and a labelled review",
            timeout=240,
        )
        log = run.interrupt()
    _clean(log)
    percent, count = _accuracy(log, "reviews:1")
    assert count >= 200 and percent > 90.0, log[-3000:]


def test_the_monitored_digits_alert_on_drift_and_explain_pixels(
    digits_models: DigitsModels, tmp_path: Path
) -> None:
    drift = re.compile(r"drift-alerts-0 .*DRIFT \(\w+\) in the inputs of digits:1")
    explained = re.compile(
        r"explanations-0 .*digit \d \(p=[\d.]+\) by digits:1, .*image\[\d,\d,0\]"
    )
    with _run(
        tmp_path, str(DIGITS / "monitored.yaml"),
        "--set", f"samples.dataset={digits_models.samples}",
        "--set", f"models.keras={digits_models.keras_files[1]}",
        "--set", "samples.rate=100",
        "--set", "samples.drift_after=2000",
    ) as run:  # fmt: skip
        run.wait(
            lambda log: drift.search(log) and explained.search(log),
            what="a drift alert and an explanation of digits:1",
            timeout=300,
        )
        log = run.interrupt()
    _clean(log)


def test_model_push_switches_digits_to_onnx_then_to_a_model_server(
    digits_models: DigitsModels, tmp_path: Path
) -> None:
    """The README's flow: run, then push the ONNX graph, then a KServe server over V2.

    The server listens on a free port rather than the README's 8080, so the
    blueprint's allowlist is pointed at it, as a user points it at their own.
    """
    server = devkit.ModelServer(model_path=digits_models.keras_files[2], model_name="digits")
    server.start()  # first: its port goes into the allowlist
    try:
        with _run(
            tmp_path, str(DIGITS / "classifier.yaml"),
            "--set", f"samples.dataset={digits_models.samples}",
            "--set", f"models.keras={digits_models.keras_files[1]}",
            "--set", f"classifier.allowlist={server.url}/",
        ) as run:  # fmt: skip
            run.wait(lambda log: _served(log, "digits:1"), what="version 1", timeout=180)
            onnx = _cli(
                tmp_path, "model", "push", "digits-classifier", "classifier",
                "--onnx", str(digits_models.onnx_file), timeout=180,
            )  # fmt: skip
            assert onnx.returncode == 0, onnx.stdout + onnx.stderr + run.log()[-4000:]
            assert "pushed digits:2 (ONNX" in onnx.stdout
            remote = _cli(
                tmp_path, "model", "push", "digits-classifier", "classifier",
                "--url", server.url, "--protocol", "v2", timeout=180,
            )  # fmt: skip
            assert remote.returncode == 0, remote.stdout + remote.stderr + run.log()[-4000:]
            run.wait(lambda log: _served(log, "digits:3"), what="version 3", timeout=120)
            text = run.interrupt()
    finally:
        server.stop()
    _clean(text)
    for tag in ("digits:1", "digits:2", "digits:3"):
        percent, _ = _accuracy(text, tag)
        assert percent > 90.0, text[-4000:]
