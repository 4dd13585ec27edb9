"""Archives in and out: SavedModel directories as tar, and what an archive may unpack to.

An archive is counted before anything of it is written. Every member's
declared size and the number of members are totalled against the limits
(a 1 MB archive can declare a gigabyte of zeros, a 452 KB one fifty thousand
files), and a member that is not a plain file or directory, or whose name is
absolute or climbs with ``..``, refuses the whole archive. What it may unpack to
is also bounded by its own size (``unpack_ratio``): a gigabyte of zeros gzips to
a megabyte, so a megabyte may unpack to a hundred, not to the byte cap. Only
then is it extracted, counting the bytes again as they are written, into a
scratch directory that is renamed into place only when complete and holding a
``saved_model.pb``, and removed on any failure: a refused archive leaves
nothing in the model cache.
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
import zlib
from pathlib import Path, PurePosixPath
from typing import NamedTuple, Protocol

from streamflow.streamlets.serving.limits import Limits, MiB

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
            cap = _cap(limits, packed=archive.stat().st_size)
            with tarfile.open(archive, "r:*") as tar:
                _extract(tar, _checked_members(tar, limits, cap), scratch, cap)
            if not any(scratch.rglob("saved_model.pb")):
                raise ArchiveError("the archive holds no saved_model.pb")
        except BaseException as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            if isinstance(exc, ArchiveError):
                raise
            if isinstance(exc, tarfile.TarError | OSError | EOFError | zlib.error):
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


#: below this, an archive's ratio is not judged (a small model compresses as it likes)
RATIO_FLOOR = 64 * MiB


class _Cap(NamedTuple):
    """The most an archive may unpack to, and which limit sets it (for the message)."""

    bytes: int
    why: str


def _cap(limits: Limits, *, packed: int) -> _Cap:
    by_ratio = max(RATIO_FLOOR, limits.unpack_ratio * packed)
    if by_ratio < limits.unpacked_bytes:
        return _Cap(
            by_ratio,
            f"{limits.unpack_ratio} times its own {packed:,} bytes (max_unpack_ratio)",
        )
    return _Cap(limits.unpacked_bytes, "max_unpacked_bytes")


def _checked_members(tar: tarfile.TarFile, limits: Limits, cap: _Cap) -> list[tarfile.TarInfo]:
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
        if not (member.isreg() or member.isdir()) or member.issparse():
            raise ArchiveError(
                f"the archive member {member.name!r} is a link or a special file; "
                "a model archive holds only files and directories"
            )
        total += member.size
        if total > cap.bytes:
            raise ArchiveError(f"the archive unpacks to more than {cap.bytes:,} bytes ({cap.why})")
    return members


def _extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], root: Path, cap: _Cap) -> None:
    """Write the members under ``root``, counting the bytes as they are written.

    The headers were totalled already; this counts again what the archive really
    yields, so a header that understates its member cannot fill the disk.
    Files get fixed modes, and no name is written twice.
    """
    written = 0
    for member in members:
        path = root.joinpath(*PurePosixPath(member.name).parts)
        if member.isdir():
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        if source is None:  # pragma: no cover - a regular member always has a file
            raise ArchiveError(f"the archive member {member.name!r} has no contents")
        with source, path.open("xb") as out:
            while chunk := source.read(_CHUNK):
                written += len(chunk)
                if written > cap.bytes:
                    raise ArchiveError(
                        f"the archive unpacks to more than {cap.bytes:,} bytes ({cap.why})"
                    )
                out.write(chunk)
        path.chmod(0o644)


_CHUNK = 1 << 20


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
    cap = _cap(limits, packed=path.stat().st_size)
    if sum(info.file_size for info in infos) > cap.bytes:
        raise ArchiveError(f"the archive unpacks to more than {cap.bytes:,} bytes ({cap.why})")


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
