"""``streamflow ui`` in a real browser: Debian's headless Chromium, driven by Playwright.

As a user would: deploy a wine example with ``streamflow deploy``, start
``streamflow ui APP`` in a process of its own, open the URL it prints, and
look at the page. The classifier example shows its four streamlets, its
rates move, and ``streamflow model push`` shows up as the new version on
every serving replica; the monitored example shows a drift verdict once its
generator drifts. Nothing waits for a fixed time: each check waits for a
condition on the page, with a timeout. The browser is /usr/bin/chromium
(``./dev setup`` installs it); Playwright never downloads one.

``STREAMFLOW_UPDATE_SCREENSHOTS=1`` writes the README's screenshots
(docs/ui-classifier.png, docs/ui-monitored.png); otherwise they go to the
test's tmp dir.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from streamflow.operator.web import server
from tests.model_fixtures import WineModels
from tests.web import wine

STREAMFLOW = str(Path(sys.executable).with_name("streamflow"))
CHROMIUM = Path("/usr/bin/chromium")
DOCS = wine.ROOT / "docs"
DEPLOY_TIMEOUT_S = 420


@dataclass
class Deployed:
    root: Path
    app: str
    topics: dict[str, str]

    @property
    def home(self) -> Path:
        return self.root / "home"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
        env.update(STREAMFLOW_HOME=str(self.home), COLUMNS="200", TF_CPP_MIN_LOG_LEVEL="2")
        return env

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [STREAMFLOW, *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail("no /usr/bin/chromium: ./dev setup installs Debian's chromium", pytrace=False)
    if not server.static_ready():
        pytest.fail("the web view is not built: run ./dev setup", pytrace=False)
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield found
        found.close()


@contextlib.contextmanager
def deployed(
    blueprint: Path, tmp_path: Path, models: WineModels, bootstrap: str, *sets: str
) -> Iterator[Deployed]:
    copy, app, topics = wine.renamed_copy(blueprint, into=tmp_path / "project", models=models.dir)
    project = Deployed(copy.parent, app, topics)
    args = [f"--set={s}" for s in sets]
    result = project.cli(
        "deploy", str(copy), "-b", bootstrap, "--timeout", "6m", *args, timeout=DEPLOY_TIMEOUT_S
    )
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        yield project
    finally:
        gone = project.cli("undeploy", app, "--delete-topics", timeout=180)
        if gone.returncode != 0:
            _stop_daemon(project)


def _stop_daemon(project: Deployed) -> None:
    """After a failed undeploy: the daemon stops its replicas on SIGTERM."""
    record = project.home / "operator" / "daemon.json"
    with contextlib.suppress(OSError, ValueError, KeyError, ProcessLookupError):
        import json

        os.kill(int(json.loads(record.read_text())["pid"]), signal.SIGTERM)


@contextlib.contextmanager
def ui(project: Deployed) -> Iterator[str]:
    """``streamflow ui APP --port 0`` as a user starts it; the URL it prints."""
    process = subprocess.Popen(
        [STREAMFLOW, "ui", project.app, "--port", "0", "--no-open"],
        cwd=project.root,
        env=project.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
    try:
        try:
            url = lines.get(timeout=60).strip()
        except queue.Empty:
            url = ""
        assert url.startswith("http://127.0.0.1:"), f"no URL printed: {url!r}"
        assert url.endswith(f"/apps/{project.app}")
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, errors = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors = process.communicate()
        assert "Traceback" not in errors, errors


def screenshot(page: Page, name: str, tmp_path: Path) -> None:
    wanted = os.environ.get("STREAMFLOW_UPDATE_SCREENSHOTS") == "1"
    page.screenshot(path=str((DOCS if wanted else tmp_path) / name), full_page=True)


def rate_of(page: Page, testid: str) -> float:
    value = page.get_by_test_id(testid).get_attribute("data-rate") or ""
    return float(value) if value else 0.0


def wait_until(page: Page, condition: str, arg: object, *, timeout_s: float) -> None:
    page.wait_for_function(condition, arg=arg, timeout=timeout_s * 1000, polling=250)


def test_the_classifier_graph_is_live_and_follows_a_model_push(
    browser: Browser, kafka_bootstrap: str, wine_models: WineModels, tmp_path: Path
) -> None:
    with (
        deployed(wine.WINE / "classifier.yaml", tmp_path, wine_models, kafka_bootstrap) as app,
        ui(app) as url,
    ):
        page = browser.new_page(viewport={"width": 1680, "height": 620})
        page.goto(url)
        # the first snapshot imports the app's classes (TensorFlow among them): allow for it
        expect(page.get_by_test_id("connection")).to_have_text("live", timeout=60_000)
        for streamlet in ("samples", "models", "classifier", "accuracy"):
            expect(page.get_by_test_id(f"node-streamlet-{streamlet}")).to_be_visible()
        expect(page.locator("[data-testid^=node-streamlet-]")).to_have_count(4)
        for topic in app.topics.values():
            expect(page.get_by_test_id(f"node-topic-{topic}")).to_be_visible()
        expect(page.get_by_test_id("connection")).to_have_text("live")

        # the rates move: a number above zero, then a different one
        rate_in = "[data-testid=rate-in-classifier]"
        wait_until(page, "s => Number(document.querySelector(s).dataset.rate) > 0", rate_in,
                   timeout_s=60)  # fmt: skip
        first = rate_of(page, "rate-in-classifier")
        wait_until(
            page,
            "([s, first]) => Number(document.querySelector(s).dataset.rate) !== first",
            [rate_in, first],
            timeout_s=60,
        )
        expect(page.get_by_test_id("rate-in-classifier")).to_have_text(re.compile(r"^[\d.]+k?/s$"))
        expect(page.get_by_test_id("models-classifier")).to_contain_text("wine:1")

        pushed = app.cli(
            "model", "push", app.app, "classifier", "--keras", str(wine_models.v2.keras_file)
        )
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        expect(page.get_by_test_id("models-classifier")).to_have_text("⬢ wine:2", timeout=60_000)
        for replica in ("classifier-0", "classifier-1"):
            expect(page.get_by_test_id(f"replica-model-{replica}")).to_have_text("wine:2")
        expect(page.get_by_test_id("replicas-classifier")).to_have_text("2/2")
        screenshot(page, "ui-classifier.png", tmp_path)


def test_the_monitored_example_shows_a_drift_verdict_and_an_explanation(
    browser: Browser, kafka_bootstrap: str, wine_models: WineModels, tmp_path: Path
) -> None:
    with (
        deployed(
            wine.WINE / "monitored.yaml",
            tmp_path,
            wine_models,
            kafka_bootstrap,
            "samples.drift_after=700",
        ) as app,
        ui(app) as url,
    ):
        page = browser.new_page(viewport={"width": 2200, "height": 760})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(url)
        expect(page.get_by_test_id("connection")).to_have_text("live", timeout=60_000)
        try:
            expect(page.locator("[data-testid^=node-streamlet-]")).to_have_count(8)
        except AssertionError:
            problem = page.get_by_test_id("problem").text_content()
            raise AssertionError(f"no graph; page errors {errors}, problem {problem!r}") from None
        verdict = page.get_by_test_id("drift-verdict")
        expect(verdict).to_have_attribute("data-verdict", "drift", timeout=240_000)
        expect(verdict).to_contain_text("Drift")
        expect(page.get_by_test_id("drift-drift")).to_have_text("◎ drift")
        expect(page.get_by_test_id("explanation")).to_contain_text("wine:1", timeout=60_000)
        screenshot(page, "ui-monitored.png", tmp_path)
