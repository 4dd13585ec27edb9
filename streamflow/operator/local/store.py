"""The local target's state directory: what is wanted, where it runs, and what runs.

Everything the local target knows lives in files under ``$STREAMFLOW_HOME``,
so it survives CLI invocations and a restart of the supervisor daemon, and
the CLI and the daemon talk only through them:

* ``apps/<app>/app.json``: the desired spec (the Application's plain data,
  replicas and config included). The CLI writes it; the daemon reads it.
* ``apps/<app>/runtime.json``: the target (``local``, or ``run`` for a
  foreground run) and Kafka's address. The CLI writes it.
* ``apps/<app>/applied.json``: the spec the supervisor last applied, which
  its replicas read at start (``--app-spec``).
* ``apps/<app>/status.json``: one entry per replica process, the digest of
  the spec it reflects, and the autoscaler's count, last decision and recent
  changes for each autoscaled streamlet. The supervisor writes it.
* ``apps/<app>/logs/<streamlet>-<i>.log``: each replica's output.
* ``operator/``: the daemon's lock, pid record and log; ``kafka/``: the data
  of the daemon's embedded broker.

The CLI's commands that read an application's files directly (``tail APP``,
``model``, a foreground ``run``) find them through :func:`home` too.

Every write goes to a temporary file first and is then renamed into place, so
a reader never sees half a file. Directories are created 0700 and files 0600
(:mod:`~streamflow.operator.local.private`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamflow.operator.local import pids, private

__all__ = ["AppDir", "Home", "default_root", "digest", "home", "read_json", "write_json"]


def default_root() -> Path:
    """``$STREAMFLOW_HOME``, else ``~/.streamflow``: where the CLI keeps its state, unresolved."""
    return Path(os.environ.get("STREAMFLOW_HOME") or Path.home() / ".streamflow")


def home() -> Home:
    """The user's home (:func:`default_root`), resolved and made private first.

    Commands that read an application's files directly (``tail APP``, a
    foreground ``run``) start here; an older version may have left the home
    readable by others, so it is tightened before anything is read or written.
    """
    root = default_root().resolve()
    private.tighten(root)
    return Home(root)


@dataclass(frozen=True)
class Home:
    """``$STREAMFLOW_HOME``, resolved by the caller."""

    root: Path

    @property
    def apps(self) -> Path:
        return self.root / "apps"

    @property
    def operator(self) -> Path:
        return self.root / "operator"

    @property
    def kafka(self) -> Path:
        """The embedded broker's work dir: its data survives the daemon."""
        return self.root / "kafka"

    @property
    def daemon_lock(self) -> Path:
        """Held by the daemon for its whole life: free means no daemon."""
        return self.operator / "daemon.lock"

    @property
    def cli_lock(self) -> Path:
        """Held by a CLI while it starts the daemon and writes a spec, and by a daemon exiting."""
        return self.operator / "cli.lock"

    @property
    def daemon_record(self) -> Path:
        return self.operator / "daemon.json"

    @property
    def daemon_log(self) -> Path:
        return self.operator / "daemon.log"

    @property
    def kafka_wanted(self) -> Path:
        """Present while some application wants the daemon's embedded broker."""
        return self.operator / "kafka.wanted"

    def app(self, name: str) -> AppDir:
        return AppDir(self.apps / name)

    def app_names(self) -> list[str]:
        try:
            return sorted(entry.name for entry in self.apps.iterdir() if entry.is_dir())
        except FileNotFoundError:
            return []


@dataclass(frozen=True)
class AppDir:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec(self) -> Path:
        return self.path / "app.json"

    @property
    def runtime(self) -> Path:
        return self.path / "runtime.json"

    @property
    def applied(self) -> Path:
        return self.path / "applied.json"

    @property
    def status(self) -> Path:
        return self.path / "status.json"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def log_file(self, replica: str) -> Path:
        return self.logs / f"{replica}.log"

    def is_local(self) -> bool:
        """Whether the daemon manages this app (``streamflow run`` apps are not its own)."""
        runtime = read_json(self.runtime)
        return isinstance(runtime, dict) and runtime.get("target") == "local"

    def foreground_owner(self) -> int | None:
        """The pid of the ``streamflow run`` that runs this app now, if one does."""
        runtime = read_json(self.runtime)
        if not isinstance(runtime, dict) or runtime.get("target") != "run":
            return None
        owner = runtime.get("owner_pid")
        return owner if isinstance(owner, int) and pids.alive(owner) else None


def write_json(path: Path, data: Any, *, create_dirs: bool = True) -> str:
    """Write ``data`` atomically and return its digest (see :func:`digest`).

    With ``create_dirs`` False a missing directory is left missing (the
    application was removed meanwhile) and :class:`FileNotFoundError` raised.
    """
    if create_dirs:
        private.ensure_dir(path.parent)
    text = json.dumps(data, indent=2, default=str)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with private.open_private(tmp) as out:
        out.write(text)
    tmp.replace(path)
    return digest(json.loads(text))


def read_json(path: Path) -> Any:
    """The file's data, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def digest(data: Any) -> str:
    """A short digest of plain data; the same for the same content, whatever its key order."""
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
