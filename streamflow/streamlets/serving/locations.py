"""The location allowlist: which hosts and paths a descriptor may send a replica to.

Matching is on URL parts, never on string prefixes. A prefix test lets
``http://models.internal`` admit ``http://models.internal.evil.com`` and
``http://models.internal@evil.com/`` (a user name, then another host), and a
path normalised *before* it is percent-decoded lets ``%2e%2e`` climb out of a
``file://`` prefix. So a location is split into scheme, host, port and path
segments; its path is decoded first, then normalised, and a ``..`` left after
that refuses the location outright, as does a user name, a NUL or a backslash.

An allowlist entry is ``scheme://host[:port][/path]``:

* the host matches exactly (case-insensitive); ``file://`` entries have none;
* no port means the scheme's default port; ``host:`` or ``host:*`` means any port;
* the path matches whole segments: ``/models`` admits ``/models/wine.keras``
  but not ``/models-old/wine.keras``.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Sequence

__all__ = ["Location", "allowed", "parse"]

SCHEMES = ("file", "http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_ANY_PORT = -1


@dataclasses.dataclass(frozen=True)
class Location:
    """A location split into the parts that are compared, its path decoded and normalised."""

    scheme: str
    host: str
    port: int | None
    segments: tuple[str, ...]

    @property
    def path(self) -> str:
        """The decoded, normalised path (what a ``file://`` location reads)."""
        return "/" + "/".join(self.segments)

    def within(self, entry: Location) -> bool:
        return (
            self.scheme == entry.scheme
            and self.host == entry.host
            and (entry.port == _ANY_PORT or entry.port == self.port)
            and self.segments[: len(entry.segments)] == entry.segments
        )


def parse(location: str) -> Location | None:
    """The parts of a location, or None when it is not one a replica may use at all."""
    return _parse(location, entry=False)


def allowed(location: str, allowlist: Sequence[str]) -> bool:
    """Whether ``location`` lies within an entry of ``allowlist`` (see the module's rules)."""
    where = parse(location)
    if where is None:
        return False
    entries = (_parse(text, entry=True) for text in allowlist if text)
    return any(entry is not None and where.within(entry) for entry in entries)


def _parse(text: str, *, entry: bool) -> Location | None:
    try:
        parsed = urllib.parse.urlsplit(text)
    except ValueError:
        return None
    scheme = parsed.scheme.lower()
    netloc = parsed.netloc
    if scheme not in SCHEMES or "@" in netloc or "\\" in netloc:
        return None
    port: int | None
    if entry and (netloc.endswith(":") or netloc.endswith(":*")):
        netloc, port = netloc.removesuffix("*").removesuffix(":"), _ANY_PORT
        explicit = None
    else:
        port, explicit = None, netloc
    try:
        host_part = urllib.parse.urlsplit(f"//{netloc}")
        host = (host_part.hostname or "").lower()
        if explicit is not None:
            port = host_part.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port that is not a number, or out of range
        return None
    if scheme == "file":
        if host not in ("", "localhost") or port not in (None, _ANY_PORT):
            return None
        host, port = "", None
    elif not host:
        return None
    segments = _segments(parsed.path)
    if segments is None:
        return None
    return Location(scheme, host, port, segments)


def _segments(raw: str) -> tuple[str, ...] | None:
    """Decode, then normalise, then refuse what is left of ``..`` (and NULs, backslashes)."""
    try:
        path = urllib.parse.unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None
    if "\x00" in path or "\\" in path:
        return None
    segments = tuple(part for part in path.split("/") if part not in ("", "."))
    if ".." in segments:
        return None
    return segments
