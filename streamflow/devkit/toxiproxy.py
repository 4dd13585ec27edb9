"""Toxiproxy: a real fault-injecting TCP proxy for the chaos tests, and its client.

Why a proxy, and this one: the network faults a streaming runtime must survive
(latency, a slow link, connections reset, a partition) happen between the
replicas and the broker, so the tests need something on that path that can
cause them on demand without touching either end. Shopify's Toxiproxy is
built for exactly that; `tools/toxiproxy/build` makes `toxiproxy-server` from
its Go module, pinned like the project's other Go tools.

Design choices, each for a reason (the same as for the development Kafka):

* The server's API port is picked at first start and kept for the object's
  lifetime; the server runs in its own session, an atexit hook stops any
  server still running, and readiness is polled (`GET /version`), never slept.
* Its output goes to `server.log` in a work dir, quoted back when it fails;
  at ``info`` by default (each connection, each proxy), since its default,
  ``trace``, writes lines for every chunk of data it forwards.
* The client is a thin typed layer over the REST API (httpx, no proxies from
  the environment): a `Proxy` handle per proxy, one method per kind of fault.
  An error the API answers becomes a `DevkitError` that quotes it.
* Kafka clients reconnect to the broker's *advertised* address, so a proxy in
  front of Kafka needs a broker that advertises the proxy:
  `KafkaBroker(advertised=...)` and its `proxied_listener`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from streamflow.devkit import _local
from streamflow.devkit.kafka import DevkitError

__all__ = ["Proxy", "Toxic", "ToxiproxyServer", "find_toxiproxy", "free_port"]

Stream = Literal["upstream", "downstream"]

_HOST = "127.0.0.1"
_BINARY = "toxiproxy-server"
_BIN_ENV = "STREAMFLOW_TOXIPROXY_BIN"
_BIN_RELATIVE = Path("tools") / "toxiproxy" / "bin"
_BUILD_HINT = "Run `tools/toxiproxy/build` (or `./dev setup`) to build it."
_STOP_GRACE_S = 5.0
_POLL_INTERVAL_S = 0.05
_API_TIMEOUT_S = 10.0


def find_toxiproxy(*, bin_dir: Path | None = None) -> Path:
    """`toxiproxy-server` in `bin_dir`, `$STREAMFLOW_TOXIPROXY_BIN`, or `tools/toxiproxy/bin`.

    The last is searched upwards from the current directory and from this package.
    """
    explicit = bin_dir or (Path(env) if (env := os.environ.get(_BIN_ENV)) else None)
    folder = explicit.expanduser() if explicit is not None else _local.find_upwards(_BIN_RELATIVE)
    if folder is None:
        raise DevkitError(
            f"No {_BINARY} found: {_BIN_RELATIVE} is not above {Path.cwd()} or the streamflow "
            f"package, and ${_BIN_ENV} is not set. {_BUILD_HINT}"
        )
    binary = folder / _BINARY
    if not os.access(binary, os.X_OK):
        raise DevkitError(f"{folder} holds no executable {_BINARY}. {_BUILD_HINT}")
    return binary.resolve()


@dataclass(frozen=True)
class Toxic:
    """One fault on a proxy, as the API describes it.

    ``stream`` is the direction it acts on: ``downstream`` is what the upstream
    (the broker) sends to the client, ``upstream`` what the client sends.
    ``toxicity`` is the share of connections it applies to (1.0: all).
    """

    name: str
    type: str
    stream: Stream
    attributes: dict[str, int]
    toxicity: float = 1.0

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> Toxic:
        return cls(
            name=data["name"],
            type=data["type"],
            stream=data["stream"],
            attributes=dict(data.get("attributes") or {}),
            toxicity=float(data.get("toxicity", 1.0)),
        )


class Proxy:
    """A handle on one proxy of a running server: its faults, and switching it off and on."""

    def __init__(self, http: httpx.Client, *, name: str, listen: str, upstream: str) -> None:
        self._http = http
        self.name = name
        self.listen = listen
        self.upstream = upstream

    def __repr__(self) -> str:
        return f"Proxy({self.name!r}, {self.listen} -> {self.upstream})"

    @property
    def enabled(self) -> bool:
        return bool(_call(self._http, "GET", f"/proxies/{self.name}")["enabled"])

    def disable(self) -> None:
        """A partition: close every connection through the proxy and refuse new ones."""
        self._set_enabled(False)

    def enable(self) -> None:
        """Heal the partition: listen again on the same address."""
        self._set_enabled(True)

    def latency(
        self, ms: int, *, jitter_ms: int = 0, stream: Stream = "downstream", name: str = ""
    ) -> Toxic:
        """Delay the data in ``stream`` by ``ms`` (± ``jitter_ms``)."""
        return self.add_toxic("latency", stream=stream, name=name, latency=ms, jitter=jitter_ms)

    def bandwidth(self, kb_per_s: int, *, stream: Stream = "downstream", name: str = "") -> Toxic:
        """Limit ``stream`` to ``kb_per_s`` kilobytes a second."""
        return self.add_toxic("bandwidth", stream=stream, name=name, rate=kb_per_s)

    def reset_peer(
        self, *, after_ms: int = 0, stream: Stream = "downstream", name: str = ""
    ) -> Toxic:
        """Reset connections (TCP RST) ``after_ms`` after they carry data; new ones too."""
        return self.add_toxic("reset_peer", stream=stream, name=name, timeout=after_ms)

    def timeout(self, ms: int, *, stream: Stream = "downstream", name: str = "") -> Toxic:
        """Let no data through and close each connection after ``ms`` (0: keep it hanging)."""
        return self.add_toxic("timeout", stream=stream, name=name, timeout=ms)

    def add_toxic(
        self, kind: str, *, stream: Stream = "downstream", name: str = "", **attributes: int
    ) -> Toxic:
        """Add a toxic of any kind the server knows; it acts on open connections too."""
        body = {
            "name": name or f"{kind}_{stream}",
            "type": kind,
            "stream": stream,
            "toxicity": 1.0,
            "attributes": attributes,
        }
        return Toxic.from_api(_call(self._http, "POST", f"/proxies/{self.name}/toxics", body))

    def remove_toxic(self, toxic: Toxic | str) -> None:
        name = toxic.name if isinstance(toxic, Toxic) else toxic
        _call(self._http, "DELETE", f"/proxies/{self.name}/toxics/{name}")

    def toxics(self) -> list[Toxic]:
        return [Toxic.from_api(t) for t in _call(self._http, "GET", f"/proxies/{self.name}/toxics")]

    def clear(self) -> None:
        """Remove every toxic and enable the proxy: back to a clean link."""
        for toxic in self.toxics():
            self.remove_toxic(toxic)
        self.enable()

    def delete(self) -> None:
        _call(self._http, "DELETE", f"/proxies/{self.name}")

    def _set_enabled(self, enabled: bool) -> None:
        _call(self._http, "PATCH", f"/proxies/{self.name}", {"enabled": enabled})


class ToxiproxyServer(_local.LocalService):
    """`toxiproxy-server` in a child process, and the proxies made on it."""

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        work_dir: Path | None = None,
        keep: bool = False,
        log_level: str = "info",
    ) -> None:
        self._bin_dir = bin_dir
        self._log_level = log_level
        self._given_work_dir = work_dir
        self._keep = keep
        self._work_dir: Path | None = None
        self._port = 0
        self._process: subprocess.Popen[bytes] | None = None
        # trust_env=False: a proxy from the environment must not see requests to 127.0.0.1
        self._http = httpx.Client(trust_env=False, timeout=_API_TIMEOUT_S)

    def __repr__(self) -> str:
        where = self.url if self._port else "not started"
        return f"ToxiproxyServer({where}, running={self.is_running})"

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>` of the API; stable while the object lives."""
        if not self._port:
            raise DevkitError("The Toxiproxy server has not been started.")
        return f"http://{_HOST}:{self._port}"

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout: float = 30.0) -> None:
        """Start the server and wait until its API answers."""
        if self.is_running:
            return
        binary = find_toxiproxy(bin_dir=self._bin_dir)
        work_dir = self._prepare_work_dir()
        if not self._port:
            self._port = free_port()
        self._http.base_url = httpx.URL(self.url)
        with (work_dir / "server.log").open("ab") as out:
            self._process = subprocess.Popen(
                [str(binary), "-host", _HOST, "-port", str(self._port)],
                cwd=work_dir,
                env={**os.environ, "LOG_LEVEL": self._log_level},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _running.add(self)
        try:
            self._wait_until_ready(deadline=time.monotonic() + timeout)
        except BaseException:
            self._terminate()
            raise

    def stop(self) -> None:
        """Stop the server (its proxies go with it); remove the work dir unless kept."""
        self._terminate()
        if self._work_dir is not None and self._given_work_dir is None and not self._keep:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None

    def create_proxy(self, name: str, *, upstream: str, listen: str = f"{_HOST}:0") -> Proxy:
        """A proxy from ``listen`` (port 0: any free one) to ``upstream``, enabled."""
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        made = _call(self._http, "POST", "/proxies", body)
        return Proxy(self._http, name=name, listen=made["listen"], upstream=made["upstream"])

    def proxy(self, name: str) -> Proxy:
        """A handle on a proxy made earlier."""
        data = _call(self._http, "GET", f"/proxies/{name}")
        return Proxy(self._http, name=name, listen=data["listen"], upstream=data["upstream"])

    def reset(self) -> None:
        """Every proxy enabled and without toxics."""
        _call(self._http, "POST", "/reset")

    def _prepare_work_dir(self) -> Path:
        if self._work_dir is None:
            if self._given_work_dir is not None:
                self._given_work_dir.mkdir(parents=True, exist_ok=True)
                self._work_dir = self._given_work_dir.resolve()
            else:
                self._work_dir = Path(tempfile.mkdtemp(prefix="streamflow-toxiproxy-"))
        return self._work_dir

    def _wait_until_ready(self, *, deadline: float) -> None:
        while not self._answers():
            if self._process is not None and (code := self._process.poll()) is not None:
                raise DevkitError(f"toxiproxy-server exited with code {code}.{self._tail()}")
            if time.monotonic() >= deadline:
                raise DevkitError(f"toxiproxy-server did not answer in time.{self._tail()}")
            time.sleep(_POLL_INTERVAL_S)

    def _answers(self) -> bool:
        try:
            return self._http.get("/version", timeout=1.0).status_code == 200
        except httpx.HTTPError:  # refused while starting
            return False

    def _tail(self) -> str:
        if self._work_dir is None:
            return ""
        text = _local.tail(self._work_dir / "server.log")
        return f" Work dir: {self._work_dir}\n{text}" if text else f" Work dir: {self._work_dir}"

    def _terminate(self) -> None:
        process, self._process = self._process, None
        _running.discard(self)
        _local.terminate(process, grace=_STOP_GRACE_S)


def free_port() -> int:
    """A port on 127.0.0.1 free now: for a proxy's listen address chosen before it exists."""
    return _local.free_ports(hosts=[_HOST])[0]


def _call(http: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    try:
        response = http.request(method, path, json=body)
    except httpx.HTTPError as error:
        raise DevkitError(f"Toxiproxy {method} {path} failed: {error}") from error
    if response.status_code >= 400:
        raise DevkitError(
            f"Toxiproxy {method} {path} answered {response.status_code}: {response.text.strip()}"
        )
    return response.json() if response.content else None


_running: set[ToxiproxyServer] = set()


@atexit.register
def _stop_all() -> None:
    """Stop servers a crashed or careless session left running, so none outlives Python."""
    for server in list(_running):
        server.stop()
