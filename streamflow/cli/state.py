"""Where the CLI keeps what it knows about locally running applications.

``$STREAMFLOW_HOME`` (default ``~/.streamflow``) holds ``apps/<name>/`` with
the application spec and what the local target runs. Commands such as
``tail APP`` read it to find an application's topics and brokers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from streamflow.operator.local import private

__all__ = ["app_dir", "home", "read_json", "write_json"]


def home() -> Path:
    """The home, made private first if an older version left it readable by others."""
    root = Path(os.environ.get("STREAMFLOW_HOME") or Path.home() / ".streamflow").resolve()
    private.tighten(root)
    return root


def app_dir(name: str) -> Path:
    return home() / "apps" / name


def write_json(path: Path, data: Any) -> None:
    """Atomically, and readable by this user alone (directories 0700, the file 0600)."""
    private.ensure_dir(path.parent)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with private.open_private(tmp) as out:
        out.write(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
