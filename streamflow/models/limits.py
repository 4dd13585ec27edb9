"""How much an artifact may cost a replica: bytes, files and time.

An artifact comes from whoever can write the control topic, so everything it
can make a replica spend is bounded: the bytes it downloads or carries inline,
the bytes and files it unpacks to, and the wall-clock time its download may
take in all (not per read, which a server dripping one byte at a time never
trips). The serving streamlets fill these from their parameters.
"""

from __future__ import annotations

import dataclasses

__all__ = ["GiB", "Limits", "MiB"]

MiB = 1 << 20
GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Limits:
    """``artifact_bytes`` per artifact; ``unpacked_*`` per archive, and ``unpack_ratio`` times
    its own size (past 64 MiB); ``download_seconds`` overall, ``read_seconds`` for any one
    read (so a silent server is noticed before the deadline)."""

    artifact_bytes: int = 1 * GiB
    unpacked_bytes: int = 4 * GiB
    unpacked_files: int = 10_000
    unpack_ratio: int = 100
    download_seconds: float = 600.0
    read_seconds: float = 30.0
