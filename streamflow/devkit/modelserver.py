"""A real KServe model server, started as a child process from its own virtualenv.

Why the real server, and in a child process: the remote model client must speak
KServe V1 and the Open Inference Protocol V2 as a production server speaks them,
so tests and the bench call KServe's own ModelServer. It needs FastAPI, grpcio and
TensorFlow at versions that are KServe's business, not streamflow's, so it lives
in `tools/modelserver/.venv` (made by `tools/modelserver/setup`) and runs
`tools/modelserver/serve.py` there.

Design choices, each for a reason (the same as for the development Kafka):

* The HTTP port (and the gRPC port, when asked for) is picked at first start and
  kept for the object's lifetime, so `restart()` comes back at the same `url` and
  a client that survives the outage needs no new address.
* The server runs in its own session, so Ctrl-C in a terminal reaches only us;
  an atexit hook stops any server still running, so none outlives Python.
* Readiness is a condition (the server says ready, then the model says ready),
  polled until a deadline, never a fixed sleep.
* Its output goes to `server.log` in a work dir, quoted back when it fails, so a
  failure explains itself.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from streamflow.devkit import _local
from streamflow.devkit.kafka import DevkitError

__all__ = ["ModelServer", "find_modelserver"]

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_TOOL_RELATIVE = Path("tools") / "modelserver"
_VENV_ENV = "STREAMFLOW_MODELSERVER_VENV"
_SETUP_HINT = "Run `tools/modelserver/setup` (or `./dev setup`) to create it."
_STOP_GRACE_S = 10.0
_POLL_INTERVAL_S = 0.1
# A port found free is free only until someone binds it: on a busy machine an outgoing
# connection (they take ports from the same ephemeral range) can take it first. A server
# on ports it picked itself is started once more on new ones when that happens.
_LAUNCHES = 2
_PORT_TAKEN = "address already in use"
# Variables that would point the server's Python at another environment's packages.
_FOREIGN_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


def find_modelserver(*, venv: Path | None = None) -> tuple[Path, Path]:
    """The model server's Python and `serve.py`.

    The virtualenv is `venv`, `$STREAMFLOW_MODELSERVER_VENV`, or `tools/modelserver/.venv`;
    `tools/modelserver` is searched upwards from the current directory and from this package.
    """
    tool = _find_tool_dir()
    explicit = venv or (Path(env) if (env := os.environ.get(_VENV_ENV)) else None)
    chosen = (explicit.expanduser() if explicit is not None else tool / ".venv").absolute()
    python = chosen / "bin" / "python"
    if not os.access(python, os.X_OK):
        raise DevkitError(f"The model server's virtualenv {chosen} does not exist. {_SETUP_HINT}")
    return python, tool / "serve.py"


def _find_tool_dir() -> Path:
    found = _local.find_upwards(_TOOL_RELATIVE, marker="serve.py")
    if found is not None:
        return found.resolve()
    raise DevkitError(
        f"No model server found: {_TOOL_RELATIVE}/serve.py is not above {Path.cwd()} or the "
        "streamflow package. Run this from a streamflow checkout."
    )


class ModelServer(_local.LocalService):
    """KServe's ModelServer serving one Keras or SavedModel artifact; see the module docstring."""

    def __init__(
        self,
        *,
        model_path: Path | str,
        model_name: str = "model",
        model_version: str | None = None,
        port: int = 0,
        grpc_port: int | None = None,
        venv: Path | None = None,
        work_dir: Path | None = None,
        keep: bool = False,
    ) -> None:
        """`port=0` picks a free port; `grpc_port` (0 = pick one) also serves V2 over gRPC."""
        self._model_path = Path(model_path).absolute()
        self._model_name = model_name
        self._model_version = model_version
        self._port = port
        self._grpc_port = grpc_port
        self._venv = venv
        self._given_work_dir = work_dir
        self._keep = keep
        self._work_dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        where = self.url if self._port else "not started"
        return f"ModelServer({self._model_name!r} at {where}, running={self.is_running})"

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`; stable across `restart()`."""
        if not self._port:
            raise DevkitError("The model server has not been started.")
        return f"http://{_HOST}:{self._port}"

    @property
    def predict_url(self) -> str:
        """The KServe V1 (TF Serving style) endpoint: POST {"instances": [[...], ...]}."""
        return f"{self.url}/v1/models/{self._model_name}:predict"

    @property
    def infer_url(self) -> str:
        """The Open Inference Protocol V2 endpoint: POST {"inputs": [{...}]}."""
        return f"{self.url}/v2/models/{self._model_name}/infer"

    @property
    def grpc_target(self) -> str | None:
        """`127.0.0.1:<port>` of the V2 gRPC service, when it was asked for."""
        return f"{_HOST}:{self._grpc_port}" if self._grpc_port else None

    @property
    def work_dir(self) -> Path | None:
        """The folder with `server.log`, once started."""
        return self._work_dir

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout: float = 120.0) -> None:
        """Start the server (on its earlier ports); wait for the model to be ready."""
        if self.is_running:
            return
        python, serve = find_modelserver(venv=self._venv)
        if not self._model_path.exists():
            raise DevkitError(f"No model to serve at {self._model_path}.")
        work_dir = self._prepare_work_dir()
        # ports given, or kept from an earlier start (`restart()` comes back on them), stay
        picks_http, picks_grpc = not self._port, self._grpc_port == 0
        deadline = time.monotonic() + timeout
        for launch in range(1, _LAUNCHES + 1):
            if picks_http or picks_grpc:
                http, grpc = _local.free_ports(2)  # both at once, so they differ
                self._port = http if picks_http else self._port
                self._grpc_port = grpc if picks_grpc else self._grpc_port
            self._process = self._launch(python=python, serve=serve, work_dir=work_dir)
            _running.add(self)
            try:
                self._wait_until_ready(deadline=deadline)
                return
            except _PortTaken:
                self._terminate(grace=0.0)
                if launch == _LAUNCHES or not (picks_http or picks_grpc):
                    raise
                log.info("the model server's port was taken before it bound it; new ports")
            except BaseException:
                self._terminate(grace=0.0)
                raise

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); remove the work dir unless kept. Idempotent."""
        self._terminate(grace=_STOP_GRACE_S)
        if self._work_dir is not None and self._given_work_dir is None and not self._keep:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None

    def kill(self) -> None:
        """Crash the server (SIGKILL), keeping its ports for `start()`/`restart()`."""
        self._terminate(grace=0.0)

    def restart(self, *, timeout: float = 120.0, hard: bool = False) -> None:
        """Stop the server (SIGKILL when `hard`), then start it again on the same ports."""
        self._terminate(grace=0.0 if hard else _STOP_GRACE_S)
        self.start(timeout=timeout)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections are accepted, but nothing answers."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Thaw a paused server (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def _prepare_work_dir(self) -> Path:
        if self._work_dir is None:
            if self._given_work_dir is not None:
                self._given_work_dir.mkdir(parents=True, exist_ok=True)
                self._work_dir = self._given_work_dir.resolve()
            else:
                self._work_dir = Path(tempfile.mkdtemp(prefix="streamflow-modelserver-"))
        return self._work_dir

    def _launch(self, *, python: Path, serve: Path, work_dir: Path) -> subprocess.Popen[bytes]:
        command = [
            str(python),
            str(serve),
            "--model-name",
            self._model_name,
            "--model-path",
            str(self._model_path),
            "--http-port",
            str(self._port),
        ]
        if self._grpc_port:
            command += ["--grpc-port", str(self._grpc_port)]
        if self._model_version is not None:
            command += ["--model-version", self._model_version]
        env = {key: value for key, value in os.environ.items() if key not in _FOREIGN_ENV}
        env |= {"PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
        with (work_dir / "server.log").open("ab") as out:
            return subprocess.Popen(
                command,
                cwd=work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_until_ready(self, *, deadline: float) -> None:
        for path in ("/v2/health/ready", f"/v2/models/{self._model_name}/ready"):
            while not _answers_ok(f"{self.url}{path}"):
                if self._process is not None and (code := self._process.poll()) is not None:
                    tail = self._tail()
                    kind = _PortTaken if _PORT_TAKEN in tail else DevkitError
                    raise kind(f"The model server exited with code {code} while starting.{tail}")
                if time.monotonic() >= deadline:
                    raise DevkitError(f"The model server did not become ready.{self._tail()}")
                time.sleep(_POLL_INTERVAL_S)

    def _tail(self, *, lines: int = 30) -> str:
        if self._work_dir is None:
            return ""
        log = self._work_dir / "server.log"
        try:
            text = "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            text = ""
        return f" Log: {log}\n{text}" if text else f" Log: {log}"

    def _terminate(self, *, grace: float) -> None:
        process, self._process = self._process, None
        _running.discard(self)
        _local.terminate(process, grace=grace)

    def _signal(self, signum: signal.Signals) -> None:
        if self._process is None or self._process.poll() is not None:
            raise DevkitError("The model server is not running.")
        os.kill(self._process.pid, signum)


# No proxies: an http_proxy in the environment must not swallow requests to 127.0.0.1.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _PortTaken(DevkitError):
    """The server exited because another process had bound one of its ports."""


def _answers_ok(url: str) -> bool:
    try:
        with _opener.open(url, timeout=1.0) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError):  # refused while starting, 503 until ready
        return False


_running: set[ModelServer] = set()


@atexit.register
def _stop_all() -> None:
    """Stop servers a crashed or careless session left running, so none outlives Python."""
    for server in list(_running):
        server.stop()
