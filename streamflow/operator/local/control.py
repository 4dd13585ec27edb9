"""The CLI's side of the daemon: find it, start it, ask it for the embedded broker.

Only one daemon may run per home, and a deploy must never write its spec
into a home whose daemon is deciding to exit. Both follow from one lock,
``operator/cli.lock``: a deploy holds it from "is a daemon running?" to "my
spec is written", and the daemon takes it (without waiting) to exit.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from streamflow.operator.local import locks, pids, private, store

__all__ = ["DaemonError", "daemon_info", "embedded_kafka", "ensure_daemon", "spec_lock"]

_POLL_S = 0.1
_DYING_S = 10.0


class DaemonError(RuntimeError):
    """The daemon could not be started or did not do what was asked."""


@contextlib.contextmanager
def spec_lock(home: store.Home, *, timeout: float = 120.0) -> Iterator[None]:
    """Hold the CLI lock: no daemon exits and no other CLI writes a spec meanwhile."""
    with locks.locked(home.cli_lock, timeout=timeout) as got:
        if not got:
            raise DaemonError(f"another streamflow command holds {home.cli_lock}; try again")
        yield


def daemon_info(home: store.Home) -> dict[str, Any] | None:
    """The running daemon's record (pid, Kafka), or None when no daemon runs."""
    if not locks.is_held(home.daemon_lock):
        return None
    record = store.read_json(home.daemon_record)
    return record if isinstance(record, dict) else {}


def ensure_daemon(home: store.Home, *, timeout: float = 30.0) -> int:
    """The daemon's pid, starting one if none runs. Call it under :func:`spec_lock`."""
    found = daemon_info(home)
    if found is not None and not pids.alive(found.get("pid")):
        # A daemon just killed: its main thread is a zombie already, but its lock goes
        # only when its last thread has exited, a moment later.
        pids.wait_until(lambda: daemon_info(home) is None, timeout=_DYING_S)
        found = daemon_info(home)
    process = _spawn(home) if found is None else None
    deadline = time.monotonic() + timeout
    while True:
        info = daemon_info(home)
        pid = info.get("pid") if info else None
        if isinstance(pid, int) and pids.alive(pid):
            return pid
        if info is None and process is not None and process.poll() is not None:
            raise DaemonError(f"the supervisor daemon exited at start:\n{_log_tail(home)}")
        if time.monotonic() > deadline:
            raise DaemonError(f"the supervisor daemon did not start in {timeout:.0f}s")
        time.sleep(_POLL_S)


def _spawn(home: store.Home) -> subprocess.Popen[bytes]:
    private.ensure_dir(home.operator)
    with private.open_private_binary(home.daemon_log) as out:
        return subprocess.Popen(
            [sys.executable, "-m", "streamflow.operator.local.daemon", "--home", str(home.root)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=home.root,
            start_new_session=True,  # not ours to stop with Ctrl-C, nor to die with us
        )


def embedded_kafka(home: store.Home, *, timeout: float = 180.0) -> str:
    """Ask the daemon for its embedded broker and wait for its address."""
    store.write_json(home.kafka_wanted, {"at": time.time()})
    deadline = time.monotonic() + timeout
    while True:
        info = daemon_info(home)
        if info is None:
            raise DaemonError(f"the supervisor daemon stopped:\n{_log_tail(home)}")
        if info.get("kafka"):
            return str(info["kafka"])
        if info.get("kafka_error"):
            raise DaemonError(str(info["kafka_error"]))
        if time.monotonic() > deadline:
            raise DaemonError(f"the embedded Kafka broker was not ready in {timeout:.0f}s")
        time.sleep(_POLL_S)


def release_kafka_request(home: store.Home) -> None:
    with contextlib.suppress(FileNotFoundError):
        home.kafka_wanted.unlink()


def _log_tail(home: store.Home, lines: int = 20) -> str:
    try:
        text = home.daemon_log.read_text(errors="replace")
    except FileNotFoundError:
        return "(no daemon log)"
    return "\n".join(text.splitlines()[-lines:])
