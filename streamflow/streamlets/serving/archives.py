"""Archives in and out: SavedModel directories as tar, and what an archive may unpack to.

An archive is counted before anything of it is written. Every member's
declared size and the number of members are totalled against the limits
(a 1 MB archive can declare a gigabyte of zeros, a 452 KB one fifty thousand
files), and a member that is not a plain file or directory, or whose name is
absolute or climbs with ``..``, refuses the whole archive. Only then is it
extracted, into a scratch directory that is renamed into place when complete
and removed on any failure, so no half-unpacked directory is left behind.
A Keras file is a zip that Keras reads itself: its members are counted the
same way, from the zip's directory, before Keras opens it.

Archives we write are deterministic (sorted names, no times or owners, fixed
modes), so the same directory has the same digest on every machine.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Protocol

from streamflow.streamlets.serving.limits import Limits

__all__ = ["ArchiveError", "TooBig", "check_zip", "pack_directory", "unpack", "write_tar"]


class ArchiveError(Exception):
    """An archive that is unreadable or over its limits; nothing of it was kept."""


class TooBig(Exception):
    """A directory larger than the byte cap, found while archiving it."""


class _Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


def unpack(archive: Path, *, into: Path, limits: Limits) -> Path:
    """Unpack a (gzipped) tar SavedModel once; returns the directory holding saved_model.pb."""
    target = into / (archive.name + ".d")
    if not target.is_dir():
        scratch = Path(tempfile.mkdtemp(dir=into, prefix=".unpack-"))
        try:
            with tarfile.open(archive, "r:*") as tar:
                members = _checked_members(tar, limits)
                tar.extractall(scratch, members=members, filter="data")
        except BaseException as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            if isinstance(exc, ArchiveError):
                raise
            if isinstance(exc, tarfile.TarError | OSError | EOFError):
                raise ArchiveError(f"not a readable SavedModel archive: {exc}") from None
            raise
        try:
            os.replace(scratch, target)
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
            if not target.is_dir():
                raise
            # another replica on this machine unpacked it first
    found = sorted(target.rglob("saved_model.pb"))
    if not found:
        raise ArchiveError("the archive holds no saved_model.pb")
    return found[0].parent


def _checked_members(tar: tarfile.TarFile, limits: Limits) -> list[tarfile.TarInfo]:
    """Every member, read from the headers alone and totalled; refuses past the limits."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        members.append(member)
        if len(members) > limits.unpacked_files:
            raise ArchiveError(
                f"the archive holds more than {limits.unpacked_files} files (max_unpacked_files)"
            )
        _check_name(member.name)
        if not (member.isfile() or member.isdir()):
            raise ArchiveError(
                f"the archive member {member.name!r} is a link or a special file; "
                "a model archive holds only files and directories"
            )
        total += member.size
        if total > limits.unpacked_bytes:
            raise ArchiveError(
                f"the archive unpacks to more than {limits.unpacked_bytes} bytes "
                "(max_unpacked_bytes)"
            )
    return members


def _check_name(name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or "\x00" in name:
        raise ArchiveError(f"the archive member {name!r} would land outside the model's directory")


def check_zip(path: Path, *, limits: Limits) -> None:
    """Refuse a zip (a Keras file) whose members, by its directory, exceed the limits."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"not a Keras file (a .keras zip): {exc}") from None
    if len(infos) > limits.unpacked_files:
        raise ArchiveError(
            f"the archive holds more than {limits.unpacked_files} files (max_unpacked_files)"
        )
    for info in infos:
        _check_name(info.filename)
    if sum(info.file_size for info in infos) > limits.unpacked_bytes:
        raise ArchiveError(
            f"the archive unpacks to more than {limits.unpacked_bytes} bytes (max_unpacked_bytes)"
        )


def write_tar(directory: Path, out: _Writable, *, max_bytes: int | None = None) -> None:
    """``directory`` as a deterministic, uncompressed tar, written to ``out``.

    Raises TooBig before writing when its files add up to more than ``max_bytes``.
    """
    paths = sorted(directory.rglob("*"))
    size = sum(p.stat().st_size for p in paths if p.is_file())
    if max_bytes is not None and size > max_bytes:
        raise TooBig(str(directory))
    with tarfile.open(fileobj=_Stream(out), mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue  # links and special files are not part of a model
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(directory)))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_file():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)


def pack_directory(directory: Path, *, compress: bool = True) -> bytes:
    """A SavedModel directory as a deterministic tar.gz (what ``model push`` sends inline).

    ``compress=False`` gives the bare tar: what a replica reads from a ``file://``
    directory, so a publisher can give its sha256 (gzip's bytes vary with zlib).
    """
    buffer = io.BytesIO()
    write_tar(directory, buffer)
    raw = buffer.getvalue()
    return gzip.compress(raw, compresslevel=6, mtime=0) if compress else raw


class _Stream(io.RawIOBase):
    """A write-only file object over anything with ``write``, for tarfile's stream mode."""

    def __init__(self, out: _Writable) -> None:
        self._out = out

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._out.write(bytes(data))
        return len(data)
