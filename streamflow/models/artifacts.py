"""Model artifacts: where they may come from, proving they are what was pushed, caching.

A descriptor carries its artifact inline (``data``) or names it by
``location``. Locations are checked against the allowlist (:mod:`.locations`)
*before* anything is read, so a descriptor cannot make a replica read an
arbitrary file or call an arbitrary host. A location must come with its
sha256, a 64-digit lower-case hex digest and nothing else: the digest names
the file in the cache, and a digest that were a path (``../../x``, ``/etc/x``)
would pass any file off as a verified artifact. The cache directory is private
to the user (0700), and one another user owns is refused; a cache hit is hashed
again before it is used (and an unpacked SavedModel compared with its archive),
since anything that could write the cache could otherwise swap a model; and old
entries are evicted, keeping the most recently used few.

Downloads stream to disk under a byte cap and an overall deadline
(:mod:`.downloads`); archives are counted before they are unpacked
(:mod:`.archives`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from streamflow.models import archives, downloads
from streamflow.models.archives import pack_directory
from streamflow.models.limits import Limits
from streamflow.models.locations import allowed

__all__ = [
    "ArtifactError",
    "Limits",
    "Rejected",
    "Superseded",
    "allowed",
    "check_sha256",
    "check_zip",
    "evict",
    "fetch",
    "pack_directory",
    "private_dir",
    "unpack",
]

_DIGEST = re.compile(r"[0-9a-f]{64}")
_STALE_SECONDS = 3600.0  # a .partial- or .unpack- left this long belongs to a dead process


class ArtifactError(Exception):
    """An artifact that cannot be fetched, verified or unpacked."""


class Rejected(ArtifactError):
    """A location outside the allowlist: refused without reading anything."""


class Superseded(ArtifactError):
    """A newer descriptor arrived while this artifact was being fetched."""


def check_sha256(sha256: str | None, *, location: str | None, required: bool = True) -> str | None:
    """What is wrong with a descriptor's sha256, or None when it is fine."""
    if sha256 is None or sha256 == "":
        if location and required:
            return (
                "a descriptor with a location needs its sha256 (64 lower-case hex digits): "
                "without it the replica cannot tell the artifact from any other file"
            )
        return None
    if not _DIGEST.fullmatch(sha256):
        return "sha256 must be 64 lower-case hex digits (a digest, not a name or a path)"
    return None


def fetch(
    *,
    data: bytes | None,
    location: str | None,
    sha256: str | None,
    allowlist: Sequence[str],
    cache_dir: Path,
    timeout: float = 30.0,
    limits: Limits | None = None,
    require_sha256: bool = True,
    cancelled: threading.Event | None = None,
) -> Path:
    """The artifact as a verified local file, cached by digest; raises ArtifactError.

    ``timeout`` bounds one read; ``limits`` the bytes and the download's whole time.
    ``require_sha256=False`` is for datasets, whose digest is optional (it is still
    checked for form and against the bytes when given).
    """
    limits = limits or Limits(read_seconds=timeout)
    if data is None and not location:
        raise ArtifactError("the descriptor has neither inline data nor a location")
    problem = check_sha256(
        sha256, location=location if data is None else None, required=require_sha256
    )
    if problem:
        raise ArtifactError(problem)
    if location and not allowed(location, allowlist):
        raise Rejected(
            f"location {location!r} is not in the allowlist "
            f"({', '.join(allowlist) or 'empty: only inline artifacts are accepted'})"
        )
    private_dir(cache_dir)
    if data is not None:
        if len(data) > limits.artifact_bytes:
            raise ArtifactError(
                f"the inline artifact ({len(data)} bytes) is larger than max_artifact_bytes "
                f"({limits.artifact_bytes} bytes)"
            )
        digest = hashlib.sha256(data).hexdigest()
        _check_digest(sha256, digest)
        return _store_bytes(cache_dir, digest, data)
    assert location is not None
    if sha256 and (cached := _verified_hit(cache_dir, sha256)) is not None:
        return cached
    try:
        partial, digest = downloads.download(
            location, into=cache_dir, limits=limits, allowlist=list(allowlist), cancelled=cancelled
        )
    except downloads.Cancelled as exc:
        raise Superseded(str(exc)) from None
    except downloads.DownloadError as exc:
        raise ArtifactError(str(exc)) from None
    try:
        _check_digest(sha256, digest)
    except ArtifactError:
        partial.unlink(missing_ok=True)
        raise
    path = cache_dir / digest
    os.replace(partial, path)
    return path


def unpack(archive: Path, *, into: Path, limits: Limits | None = None) -> Path:
    """Unpack a SavedModel archive once, within ``limits``; the directory with saved_model.pb."""
    try:
        return archives.unpack(archive, into=into, limits=limits or Limits())
    except archives.ArchiveError as exc:
        raise ArtifactError(str(exc)) from None


def check_zip(path: Path, *, limits: Limits | None = None) -> None:
    """Refuse a Keras zip that would unpack past ``limits``, before Keras opens it."""
    try:
        archives.check_zip(path, limits=limits or Limits())
    except archives.ArchiveError as exc:
        raise ArtifactError(str(exc)) from None


def private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) readable by this user alone; tighten it if ours.

    A directory another user owns is refused, whatever its mode: its owner could swap
    the models served from it (and could loosen its mode again at any time).
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)
    status = path.stat()
    if status.st_uid != os.getuid():
        raise ArtifactError(
            f"the model cache {path} is owned by uid {status.st_uid} "
            f"(mode {stat.S_IMODE(status.st_mode):04o}), not by this replica's user "
            f"(uid {os.getuid()}): its owner could swap the models served from it. Set "
            "cache_dir to a directory of this user's own (a missing one is created 0700), "
            f"or chown it to uid {os.getuid()} and chmod it 0700"
        )
    if status.st_mode & 0o077:
        path.chmod(0o700)


def evict(cache_dir: Path, *, keep: int) -> list[str]:
    """Remove all but the ``keep`` most recently used artifacts (and what was made of them).

    Also removes ``.partial-`` and ``.unpack-`` leftovers of processes that died
    mid-way. Returns the evicted digests.
    """
    if not cache_dir.is_dir():
        return []
    # replicas on one machine share the cache and evict at the same moment (they load
    # the same descriptor): an entry listed here may be gone by the time it is looked at
    dated = [(mtime, p) for p in cache_dir.iterdir() if (mtime := _file_mtime(p)) is not None]
    dated.sort(key=lambda pair: pair[0], reverse=True)
    entries = [p for _, p in dated]
    evicted = []
    for entry in entries[keep:]:
        for made in (entry.with_name(entry.name + ".keras"), entry):
            made.unlink(missing_ok=True)
        shutil.rmtree(entry.with_name(entry.name + ".d"), ignore_errors=True)
        evicted.append(entry.name)
    now = time.time()
    for leftover in cache_dir.iterdir():
        if leftover.name.startswith((".partial-", ".unpack-")):
            try:
                if now - leftover.lstat().st_mtime < _STALE_SECONDS:
                    continue
            except FileNotFoundError:
                continue
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
    return evicted


def _file_mtime(path: Path) -> float | None:
    """A digest-named plain file's modification time; None for anything else, or if gone."""
    if not _DIGEST.fullmatch(path.name):
        return None
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_mtime if stat.S_ISREG(status.st_mode) else None


def _check_digest(expected: str | None, digest: str) -> None:
    if expected and digest != expected:
        raise ArtifactError(
            f"sha256 mismatch: the descriptor says {expected}, the artifact is {digest}"
        )


def _verified_hit(cache_dir: Path, sha256: str) -> Path | None:
    """The cached file for a digest, if it is a plain file whose bytes still hash to it."""
    path = cache_dir / sha256
    if path.is_symlink() or not path.is_file():
        return None
    hasher = hashlib.sha256()
    try:  # another replica's eviction may remove it at any point: then it is a miss
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                hasher.update(chunk)
        if hasher.hexdigest() != sha256:
            path.unlink(missing_ok=True)  # tampered or torn: fetch it again
            shutil.rmtree(path.with_name(path.name + ".d"), ignore_errors=True)
            return None
        os.utime(path)  # most recently used: last to be evicted
    except FileNotFoundError:
        return None
    return path


def _store_bytes(cache_dir: Path, digest: str, data: bytes) -> Path:
    path = cache_dir / digest
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".partial-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)  # always rewritten: whatever was there is not trusted
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
