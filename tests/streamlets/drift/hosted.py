"""Starting ``hosted_models.py`` (a detector and an explainer on KServe) for a test.

It runs in the model server's virtualenv (``tools/modelserver/.venv``), found the
way the devkit finds it, on a port picked once, so ``restart()`` comes back at the
same URL; readiness is polled until a deadline, never slept for.
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
    """The hosted models' server process; ``url`` stays the same across restarts."""

    def __init__(self, command: list[str], port: int, log: Path) -> None:
        self.command = command
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, timeout: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the hosted models did not start: {self._tail()}", pytrace=False)
            time.sleep(0.1)

    def stop(self) -> None:
        """Kill the server (SIGKILL): an outage, as a crash would cause it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v2/models/detector/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


@contextlib.contextmanager
def hosted(
    tmp_path: Path, *, reference: np.ndarray, weights: Sequence[float], baseline: Sequence[float]
) -> Iterator[Hosted]:
    """A running server whose detector holds ``reference`` and whose explainer explains
    the linear model ``weights`` against ``baseline``; killed on exit."""
    try:
        python, _ = devkit.find_modelserver()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    np.save(tmp_path / "reference.npy", reference)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
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
    ]
    server = Hosted(command, port, tmp_path / "hosted.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
