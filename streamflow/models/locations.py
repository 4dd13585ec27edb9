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

``streamflow verify`` warns of an entry that is looser than it looks
(:func:`loose`, :func:`config_problems`): ``host:`` admits every service on
the host, not only the model server, and an entry that does not end in ``/``
leaves its reader to guess where it ends. Read as a string prefix, as people
and other tools read it, ``https://models.example.com`` also names
``https://models.example.com.evil.net/``; streamflow never matches so, but an
entry copied from an example should say exactly what it admits.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Sequence

from streamflow.api.streamlet import ConfigProblem

__all__ = ["LOOSE_ENTRY", "Location", "allowed", "config_problems", "loose", "parse"]

LOOSE_ENTRY = "loose-allowlist-entry"  # the code of verify's warning

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


def loose(entry: str) -> tuple[str, ...]:
    """What makes an allowlist entry admit more than one origin's path; empty when nothing.

    An entry that is no entry at all admits nothing, so it is not loose either.
    """
    if _parse(entry, entry=True) is None:
        return ()
    parsed = urllib.parse.urlsplit(entry)
    reasons = []
    if _any_port(parsed.netloc):
        reasons.append(f"admits every port of {_host_of(parsed.netloc)}")
    if not parsed.path.endswith("/"):
        reasons.append("does not end at a path boundary ('/')")
    return tuple(reasons)


def config_problems(allowlist: Sequence[str], *, param: str = "allowlist") -> list[ConfigProblem]:
    """What ``streamflow verify`` says of a streamlet's allowlist: a warning per loose entry."""
    problems = []
    for index, entry in enumerate(allowlist):
        reasons = loose(entry)
        if not reasons:
            continue
        parsed = urllib.parse.urlsplit(entry)
        host, any_port = _host_of(parsed.netloc), _any_port(parsed.netloc)
        path = parsed.path if parsed.path.endswith("/") else parsed.path + "/"
        netloc = f"{host}:PORT" if any_port else parsed.netloc
        exact = urllib.parse.urlunsplit((parsed.scheme, netloc, path, "", ""))
        hint = f"write {exact}: an exact origin (scheme, host and port) and a path ending in '/'"
        if any_port:
            hint += f"; as it is, it admits {parsed.scheme}://{host}:6379/ too (any service)"
        elif parsed.path or parsed.netloc:  # no path boundary: what a prefix would also name
            wider = entry + _past_the_end(parsed)
            hint += f"; read as a string prefix, {entry} would also name {wider}"
        problems.append(
            ConfigProblem(
                LOOSE_ENTRY,
                f"entry {entry!r} {' and '.join(reasons)}",
                param,
                hint=hint,
                path=(index,),
                severity="warning",
            )
        )
    return problems


def _past_the_end(parsed: urllib.parse.SplitResult) -> str:
    """What a string prefix match would also admit past an entry that does not end in '/'."""
    if parsed.path:
        return "-old/"  # another directory
    return "@evil.net/" if ":" in parsed.netloc else ".evil.net/"  # another host


def _any_port(netloc: str) -> bool:
    return netloc.endswith(":") or netloc.endswith(":*")


def _host_of(netloc: str) -> str:
    return netloc.removesuffix("*").removesuffix(":")


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
    if entry and _any_port(netloc):
        netloc, port = _host_of(netloc), _ANY_PORT
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
