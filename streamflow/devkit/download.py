"""Downloading a pinned file: resumed where it broke off, kept only when its SHA-256 matches.

What the devkit downloads (the Kafka jars) is pinned by size and SHA-256, so
a file is trusted for what it is, not for where it came from: a mirror, a
proxy or a cache in between may serve it, and one that serves anything else
is refused. The rules, each for a reason:

* A download goes to ``NAME.part`` beside its destination and is renamed into
  place only once its checksum matches: an interrupted fetch never leaves a
  file that looks whole, and the next one resumes the part with an HTTP
  ``Range`` request instead of starting over (a server that ignores the range
  answers 200, and the part is rewritten from the start).
* A body longer than the pinned size is cut off at once; a resumed file whose
  checksum fails is fetched once more from the start (the old part may have
  been the bad piece), and a fresh one that fails is an error.
* Every way it can fail is a :class:`FetchError` with one sentence for the
  user (offline, a proxy, an HTTP status, a checksum) and a ``kind`` for code.

httpx honours ``HTTPS_PROXY``, ``NO_PROXY`` and ``SSL_CERT_FILE`` by itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from streamflow.devkit._local import DevkitError

__all__ = ["FetchError", "Pinned", "download", "sha256_of"]

_CHUNK = 256 * 1024


class FetchError(DevkitError):
    """A pinned file could not be downloaded; ``kind``: network, proxy, http or checksum."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Pinned:
    """A file to download: from ``url`` to ``path``, ``size`` bytes with this SHA-256."""

    url: str
    path: Path
    size: int
    sha256: str

    @property
    def part(self) -> Path:
        return self.path.with_name(self.path.name + ".part")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def download(client: httpx.Client, item: Pinned, *, advance: Callable[[int], None]) -> None:
    """Put ``item`` at its path, verified; ``advance(n)`` counts bytes as they are had."""
    if item.path.is_file():
        if item.path.stat().st_size == item.size and sha256_of(item.path) == item.sha256:
            advance(item.size)
            return
        item.path.unlink()  # not the pinned file: never trusted, fetched again
    resumed = _fetch_part(client, item, advance=advance)
    if sha256_of(item.part) != item.sha256 and resumed:
        item.part.unlink()  # the part kept from before may be what is wrong
        advance(-item.size)
        _fetch_part(client, item, advance=advance)
    got = sha256_of(item.part)
    if got != item.sha256:
        item.part.unlink()
        raise FetchError(
            f"{item.url} does not match its pinned SHA-256 (it is {got[:16]}…, pinned "
            f"{item.sha256[:16]}…): something between here and there served another file, "
            "and nothing of it was kept",
            kind="checksum",
        )
    item.part.replace(item.path)


def _fetch_part(client: httpx.Client, item: Pinned, *, advance: Callable[[int], None]) -> bool:
    """Bring ``item.part`` to its full size; True when it resumed an earlier part."""
    have = item.part.stat().st_size if item.part.is_file() else 0
    if have > item.size:
        item.part.unlink()
        have = 0
    advance(have)
    if have == item.size:
        return have > 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with client.stream("GET", item.url, headers=headers) as response:
            if response.status_code == 416:  # the part is no prefix of what is there now
                item.part.unlink()
                advance(-have)
                return _fetch_part(client, item, advance=advance)
            resumed = response.status_code == 206 and _continues(response, have)
            if response.status_code == 206 and not resumed:
                item.part.unlink()
                raise FetchError(
                    f"{item.url} answered with a range that was not asked for; run again",
                    kind="http",
                )
            if not resumed:
                _check_status(response, item.url)
                advance(-have)
                have = 0
            with item.part.open("ab" if resumed else "wb") as out:
                for chunk in response.iter_bytes(_CHUNK):
                    have += len(chunk)
                    if have > item.size:
                        break
                    out.write(chunk)
                    advance(len(chunk))
    except httpx.HTTPError as exc:
        raise _network_error(exc, item.url) from None
    if have != item.size:  # a whole answer of another length: another file
        item.part.unlink()
        advance(-min(have, item.size))
        if resumed:  # unless the part kept from before was the wrong piece
            return _fetch_part(client, item, advance=advance)
        raise FetchError(
            f"{item.url} is {'more' if have > item.size else 'fewer'} than the pinned "
            f"{item.size} bytes: something between here and there served another file, "
            "and nothing of it was kept",
            kind="checksum",
        )
    return resumed


def _continues(response: httpx.Response, have: int) -> bool:
    return bool(response.headers.get("content-range", "").startswith(f"bytes {have}-"))


def _check_status(response: httpx.Response, url: str) -> None:
    code = response.status_code
    if code == 200 or code == 206:
        return
    if code == 407:
        raise FetchError(
            f"the proxy asks for credentials to fetch {url} (HTTP 407): put them in "
            "HTTPS_PROXY (https://user:password@proxy:port)",
            kind="proxy",
        )
    reason = "not found there" if code == 404 else response.reason_phrase or "refused"
    raise FetchError(f"{url} answered HTTP {code} ({reason})", kind="http")


def _network_error(exc: httpx.HTTPError, url: str) -> FetchError:
    host = urlsplit(url).netloc or url
    if isinstance(exc, httpx.ProxyError):
        return FetchError(
            f"the proxy did not let this machine reach {host} ({exc}): check HTTPS_PROXY "
            "and NO_PROXY",
            kind="proxy",
        )
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return FetchError(
            f"could not connect to {host} ({exc or type(exc).__name__}): this machine looks "
            "offline, or it needs a proxy (set HTTPS_PROXY)",
            kind="network",
        )
    return FetchError(
        f"the download from {host} broke off ({exc or type(exc).__name__}); run again to resume it",
        kind="network",
    )
