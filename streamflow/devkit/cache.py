"""Where streamflow keeps what it downloads for this user: one folder, one rule.

``$STREAMFLOW_CACHE_DIR`` when set (CI, an image, a test's empty cache), else
``streamflow`` under the XDG cache folder (``$XDG_CACHE_HOME``, by default
``~/.cache``). Everything in it can be deleted; it is fetched again on use.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir"]

CACHE_ENV = "STREAMFLOW_CACHE_DIR"


def cache_dir() -> Path:
    """The user's streamflow cache folder (not created here)."""
    if explicit := os.environ.get(CACHE_ENV):
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "streamflow"
