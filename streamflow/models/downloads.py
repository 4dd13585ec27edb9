"""Reading an artifact from its location into a file: streamed, capped, hashed, on a deadline.

A location's bytes are never held in memory whole: they are written to a
``.partial-`` file in the cache as they arrive and hashed on the way, so a
400 MiB body costs a replica a small buffer, not twice its size. The byte cap
is checked against a declared Content-Length before reading and against the
bytes actually read after every chunk; the overall deadline is checked after
every chunk too, so a server that drips one byte at a time is cut off at the
deadline rather than at a per-read timeout it never trips. A superseded load
sets ``cancelled``, and the download stops at its next chunk. On any failure
the partial file is removed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from streamflow.models import archives, locations
from streamflow.models.limits import Limits

__all__ = ["Cancelled", "DownloadError", "download"]

_CHUNK = 256 * 1024


class DownloadError(Exception):
    """A location that could not be read within its limits."""


class Cancelled(DownloadError):
    """The load was superseded by a newer descriptor while downloading."""


class _Sink:
    """Writes, hashes and counts what arrives; refuses past the cap, the deadline or a cancel."""

    def __init__(
        self, out: IO[bytes], limits: Limits, cancelled: threading.Event | None, where: str
    ) -> None:
        self.out, self.limits, self.cancelled, self.where = out, limits, cancelled, where
        self.hash = hashlib.sha256()
        self.size = 0
        self.deadline = time.monotonic() + limits.download_seconds

    def check_declared(self, size: int) -> None:
        if size > self.limits.artifact_bytes:
            raise DownloadError(_too_big(self.where, self.limits, declared=size))

    def write(self, chunk: bytes) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise Cancelled("superseded while downloading")
        if time.monotonic() > self.deadline:
            raise DownloadError(
                f"{self.where} took longer than the download deadline "
                f"({self.limits.download_seconds:g}s, download_timeout)"
            )
        self.size += len(chunk)
        if self.size > self.limits.artifact_bytes:
            raise DownloadError(_too_big(self.where, self.limits))
        self.hash.update(chunk)
        self.out.write(chunk)


def download(
    location: str,
    *,
    into: Path,
    limits: Limits,
    allowlist: list[str] | tuple[str, ...],
    cancelled: threading.Event | None = None,
) -> tuple[Path, str]:
    """The location's bytes in a new file under ``into``, and their sha256; raises DownloadError.

    ``location`` must already be allowed; a ``file://`` path is checked again after
    its symbolic links are resolved, so a link cannot lead out of an allowed directory.
    """
    where = locations.parse(location)
    if where is None:
        raise DownloadError(f"{location!r} is not a usable location")
    fd, name = tempfile.mkstemp(dir=into, prefix=".partial-")
    partial = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            sink = _Sink(out, limits, cancelled, location)
            if where.scheme == "file":
                _read_file(Path(where.path), sink, allowlist)
            else:
                _read_http(location, sink)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return partial, sink.hash.hexdigest()


def _read_file(path: Path, sink: _Sink, allowlist: list[str] | tuple[str, ...]) -> None:
    resolved = path.resolve()
    if not locations.allowed(resolved.as_uri(), allowlist):
        raise DownloadError(f"{path} leads outside the allowlist (to {resolved})")
    try:
        if resolved.is_dir():  # a SavedModel directory, archived as it is read
            archives.write_tar(resolved, sink, max_bytes=sink.limits.artifact_bytes)
            return
        with resolved.open("rb") as handle:
            sink.check_declared(os.fstat(handle.fileno()).st_size)
            _pump(lambda: handle.read(_CHUNK), sink)
    except OSError as exc:
        raise DownloadError(f"cannot read {path}: {exc.strerror or exc}") from None
    except archives.TooBig:
        raise DownloadError(_too_big(str(path), sink.limits)) from None


def _read_http(location: str, sink: _Sink) -> None:
    read = min(sink.limits.read_seconds, sink.limits.download_seconds)
    timeout = httpx.Timeout(read, connect=read)
    headers = {"Accept-Encoding": "identity"}  # what is capped and hashed is what was sent
    try:
        with httpx.stream(
            "GET", location, timeout=timeout, headers=headers, follow_redirects=False
        ) as response:
            if response.status_code != 200:
                # the server's body is not repeated: it is not ours to publish
                raise DownloadError(f"HTTP {response.status_code} from {location}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit():
                sink.check_declared(int(declared))
            for chunk in response.iter_raw():  # as it arrives: a chunk size would buffer
                sink.write(chunk)
    except httpx.HTTPError as exc:
        raise DownloadError(f"cannot read {location}: {type(exc).__name__}") from None


def _pump(read: Callable[[], bytes], sink: _Sink) -> None:
    while chunk := read():
        sink.write(chunk)


def _too_big(where: str, limits: Limits, *, declared: int | None = None) -> str:
    size = f" ({declared} bytes)" if declared is not None else ""
    return (
        f"{where}{size} is larger than max_artifact_bytes ({limits.artifact_bytes} bytes); "
        "raise max_artifact_bytes on the streamlet if the model really is that large"
    )
