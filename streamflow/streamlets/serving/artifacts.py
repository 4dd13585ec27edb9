"""Model artifacts: where they may come from, proving they are what was pushed, caching.

A descriptor carries its artifact inline (``data``) or names it by
``location``. Locations are checked against an allowlist of URL prefixes
*before* anything is read, so a descriptor cannot make a replica read an
arbitrary file or call an arbitrary host. Every artifact is verified against
the descriptor's sha256 and cached on local disk under that digest, so a
restart, or a second replica on the same machine, does not fetch it again.
SavedModel directories travel as tar.gz archives and are unpacked with the
``data`` extraction filter, which refuses absolute paths, ``..`` and links
that leave the archive.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import httpx

__all__ = ["ArtifactError", "Rejected", "allowed", "fetch", "pack_directory", "unpack"]


class ArtifactError(Exception):
    """An artifact that cannot be fetched, verified or unpacked."""


class Rejected(ArtifactError):
    """A location outside the allowlist: refused without reading anything."""


def allowed(location: str, allowlist: Sequence[str]) -> bool:
    """Whether ``location`` starts with an allowed prefix (scheme, host and path).

    Paths are normalised first, so ``file:///models/../etc/passwd`` does not
    pass an allowlist of ``file:///models/``.
    """
    parsed = urllib.parse.urlsplit(location)
    if parsed.scheme not in ("file", "http", "https"):
        return False
    path = os.path.normpath(parsed.path) if parsed.path else ""
    if parsed.path.endswith("/") and not path.endswith("/"):
        path += "/"
    normalised = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))
    return any(normalised.startswith(prefix) for prefix in allowlist if prefix)


def fetch(
    *,
    data: bytes | None,
    location: str | None,
    sha256: str | None,
    allowlist: Sequence[str],
    cache_dir: Path,
    timeout: float = 60.0,
) -> Path:
    """The artifact as a verified local file, cached by digest; raises ArtifactError."""
    if data is None and not location:
        raise ArtifactError("the descriptor has neither inline data nor a location")
    if data is None:
        assert location is not None
        if not allowed(location, allowlist):
            raise Rejected(
                f"location {location!r} is not in the allowlist "
                f"({', '.join(allowlist) or 'empty: only inline artifacts are accepted'})"
            )
        cached = _cached(cache_dir, sha256)
        if cached is not None:
            return cached
        data = _read(location, timeout)
    digest = hashlib.sha256(data).hexdigest()
    if sha256 and digest != sha256.lower():
        raise ArtifactError(
            f"sha256 mismatch: the descriptor says {sha256}, the artifact is {digest}"
        )
    return _store(cache_dir, digest, data)


def _cached(cache_dir: Path, sha256: str | None) -> Path | None:
    if not sha256:
        return None
    path = cache_dir / sha256.lower()
    return path if path.is_file() else None


def _read(location: str, timeout: float) -> bytes:
    parsed = urllib.parse.urlsplit(location)
    try:
        if parsed.scheme == "file":
            path = Path(urllib.parse.unquote(parsed.path))
            if path.is_dir():
                return pack_directory(path)
            return path.read_bytes()
        response = httpx.get(location, timeout=timeout, follow_redirects=False)
        response.raise_for_status()
        return response.content
    except (OSError, httpx.HTTPError) as exc:
        raise ArtifactError(f"cannot read {location}: {exc}") from None


def _store(cache_dir: Path, digest: str, data: bytes) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / digest
    if not path.is_file():
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".partial-")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    return path


def unpack(archive: Path, *, into: Path) -> Path:
    """Unpack a tar.gz SavedModel once; returns the directory holding saved_model.pb."""
    target = into / (archive.name + ".d")
    if not target.is_dir():
        scratch = Path(tempfile.mkdtemp(dir=into, prefix=".unpack-"))
        try:
            with tarfile.open(archive, "r:*") as tar:
                tar.extractall(scratch, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            raise ArtifactError(f"not a readable SavedModel archive: {exc}") from None
        try:
            os.replace(scratch, target)
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(scratch, ignore_errors=True)  # another replica unpacked it first
    found = sorted(target.rglob("saved_model.pb"))
    if not found:
        raise ArtifactError("the archive holds no saved_model.pb")
    return found[0].parent


def pack_directory(directory: Path) -> bytes:
    """A SavedModel directory as a deterministic tar.gz (what ``model push`` sends)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(directory.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(directory)))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_file():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return gzip.compress(buffer.getvalue(), compresslevel=6, mtime=0)
