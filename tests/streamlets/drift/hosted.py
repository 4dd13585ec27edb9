"""Starting ``hosted_models.py`` (a detector and an explainer on KServe) for a test.

It runs in the model server's virtualenv (``tools/modelserver/.venv``), found the
way the devkit finds it, on a free port; readiness is polled, never slept for.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest

from streamflow import devkit

SCRIPT = Path(__file__).parent / "hosted_models.py"


class Hosted:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@contextlib.contextmanager
def hosted(
    tmp_path: Path, *, reference: np.ndarray, weights: Sequence[float], baseline: Sequence[float]
) -> Iterator[Hosted]:
    try:
        python, _ = devkit.find_modelserver()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    np.save(tmp_path / "reference.npy", reference)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "hosted.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(python),
                str(SCRIPT),
                "--http-port",
                str(port),
                "--reference",
                str(tmp_path / "reference.npy"),
                "--weights",
                json.dumps(list(weights)),
                "--baseline",
                json.dumps(list(baseline)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    server = Hosted(process, port, log)
    try:
        _wait_ready(server)
        yield server
    finally:
        server.stop()


def _wait_ready(server: Hosted, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"hosted models exited: {server.log.read_text()[-2000:]}", pytrace=False)
        try:
            if httpx.get(f"{server.url}/v2/models/detector/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"hosted models not ready in {timeout:.0f}s: {server.log.read_text()[-2000:]}")
