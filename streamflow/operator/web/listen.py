"""Running the web view's server: bind first, then serve, on the caller's thread.

The socket is bound before uvicorn starts, so a port that is taken is a clear
:class:`UiError` (and the CLI's exit 1) rather than a log line from inside
the server, and the URL is printed only once it really answers. The
operator runs the same function on a thread of its own, beside kopf, and
stops it through :class:`Running`.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

import uvicorn

from streamflow.operator import targets
from streamflow.operator.web import server
from streamflow.runtime import httpguard

__all__ = [
    "Access",
    "Running",
    "UiError",
    "bind",
    "check_exposure",
    "is_loopback",
    "serve",
    "serve_in_background",
    "url_of",
]


log = logging.getLogger("streamflow.ui")

# A head must arrive within these (50 partial heads were held open for good before).
HEADER_TIMEOUT_S = 10.0
REQUEST_LINE_TIMEOUT_S = 3.0
# Above the live views' own cap (server.MAX_STREAMS) plus the page's and API's requests.
# Per client the same: behind `kubectl port-forward`, every browser is 127.0.0.1.
MAX_CONNECTIONS = 256
MAX_CONNECTIONS_PER_CLIENT = MAX_CONNECTIONS


@dataclass(frozen=True)
class Access:
    """Who may read the view, and whether it may import the streamlets' classes.

    ``token``: what every request must carry (required beyond loopback, see
    :func:`check_exposure`); ``hosts``: the Host names answered beyond loopback;
    ``import_code``: False in the operator, which never runs an application's code.
    """

    token: str | None = None
    hosts: tuple[str, ...] = ()
    import_code: bool = True


def check_exposure(host: str, access: Access) -> None:
    """UiError for a view that would listen beyond loopback without a token."""
    if not is_loopback(host) and not access.token:
        raise UiError(
            f"the web view would listen on {host} without a token: anyone who reaches it "
            "could read every application's snapshot, dead-letter keys and error headers. "
            "Give a token (--ui-token-env / --token-env names the variable holding it), "
            "or keep it on 127.0.0.1 and use kubectl port-forward"
        )


class UiError(Exception):
    """The web view cannot start; the message says why and what to do."""


@dataclass
class Running:
    """A handle to stop a server started by :func:`serve` from another thread."""

    closing: threading.Event = field(default_factory=threading.Event)
    _server: uvicorn.Server | None = field(default=None, repr=False)

    def stop(self) -> None:
        self.closing.set()
        if self._server is not None:
            self._server.should_exit = True


class _Server(uvicorn.Server):
    """uvicorn's server, which first tells the event streams to end when told to exit."""

    def __init__(self, config: uvicorn.Config, closing: threading.Event) -> None:
        super().__init__(config)
        self.closing = closing

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.closing.set()
        super().handle_exit(sig, frame)


is_loopback = server.is_loopback


def url_of(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; UiError when the port is taken or the address is not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UiError(
                f"port {port} on {host} is already in use; pick another with --port"
            ) from None
        raise UiError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve(
    target: targets.Target,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    interval: float = 1.0,
    on_ready: Callable[[str], None] | None = None,
    running: Running | None = None,
    sock: socket.socket | None = None,
    access: Access | None = None,
) -> None:
    """Serve until Ctrl-C/SIGTERM (main thread) or ``running.stop()``; UiError if it cannot.

    ``sock``: an already bound socket (see :func:`serve_in_background`); ``access``:
    the token, Host names and code rule (the defaults: none, loopback's, import).
    """
    _check_built()
    access = access or Access()
    sock = sock or bind(host, port)
    running = running or Running()
    app = server.create_app(
        target,
        interval=interval,
        host=host,
        closing=running.closing,
        token=access.token,
        hosts=access.hosts,
        import_code=access.import_code,
    )
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
        lifespan="on",
        # a request head has a deadline, and one client cannot hold every connection
        http=httpguard.guarded_protocol(
            header_timeout=HEADER_TIMEOUT_S,
            request_line_timeout=REQUEST_LINE_TIMEOUT_S,
            max_connections=MAX_CONNECTIONS,
            max_connections_per_client=MAX_CONNECTIONS_PER_CLIENT,
            logger=log,
        ),
        limit_concurrency=MAX_CONNECTIONS + 1,  # ours refuses past it at once
    )
    instance = _Server(config, running.closing)
    running._server = instance
    if on_ready is not None:
        actual = sock.getsockname()[1]
        _announce_when_started(instance, lambda: on_ready(url_of(host, actual)))
    try:
        instance.run(sockets=[sock])
    finally:
        sock.close()


def serve_in_background(
    target: targets.Target, *, host: str, port: int, access: Access | None = None
) -> Running:
    """Serve on a daemon thread (the operator's ``--ui-port``); UiError at once if it cannot."""
    _check_built()
    sock = bind(host, port)
    running = Running()
    threading.Thread(
        target=serve,
        args=(target,),
        kwargs={"host": host, "port": port, "running": running, "sock": sock, "access": access},
        name="streamflow-ui",
        daemon=True,
    ).start()
    return running


def _check_built() -> None:
    if not server.static_ready():
        raise UiError(
            "the web view's page is not built (streamflow/operator/web/static is missing); "
            "run ./dev setup, which builds it with npm"
        )


def _announce_when_started(instance: uvicorn.Server, announce: Callable[[], None]) -> None:
    """Call ``announce`` once uvicorn is accepting connections (its startup is done)."""
    startup = instance.startup

    async def started(sockets: list[socket.socket] | None = None) -> None:
        await startup(sockets=sockets)
        if instance.started:
            announce()

    instance.startup = started  # type: ignore[method-assign]
