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

An unpacked directory already in the cache (an earlier load's, another
replica's) is used only if it holds exactly what the archive holds: the same
names, every file a plain file with the archive's bytes, nothing more. The
archive is the verified artifact (its digest is what was pushed), so it is
read again and compared with the directory on every hit; a manifest kept
beside the directory could be rewritten by whoever rewrote the directory.
Anything else is moved aside and removed, and the archive unpacked afresh.

A Keras file is a zip that Keras reads itself: its members are counted the
same way, from the zip's directory, before Keras opens it.

Archives we write are deterministic (sorted names, no times or owners, fixed
modes), so the same directory has the same digest on every machine.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import secrets
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, NamedTuple, Protocol

from streamflow.models.limits import Limits, MiB

__all__ = ["ArchiveError", "TooBig", "check_zip", "pack_directory", "unpack", "write_tar"]


class ArchiveError(Exception):
    """An archive that is unreadable or over its limits; nothing of it was kept."""


class TooBig(Exception):
    """A directory larger than the byte cap, found while archiving it."""


#: a file's size and sha256, or None for a directory
_Entry = tuple[int, str] | None


class _Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


def unpack(archive: Path, *, into: Path, limits: Limits) -> Path:
    """Unpack a (gzipped) tar SavedModel once; returns the directory holding saved_model.pb.

    A directory unpacked before is used when it still holds exactly the archive's files.
    """
    target = into / (archive.name + ".d")
    if os.path.lexists(target) and not _holds(target, archive, limits):
        _discard(target)
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


def _holds(target: Path, archive: Path, limits: Limits) -> bool:
    """Whether ``target`` is a directory holding exactly what ``archive`` unpacks to."""
    if target.is_symlink() or not target.is_dir():
        return False
    try:
        cap = _cap(limits, packed=archive.stat().st_size)
        return _matches(target, _contents(archive, limits, cap))
    except (ArchiveError, tarfile.TarError, OSError, EOFError, zlib.error):
        return False  # unreadable, or removed meanwhile: unpacking again says which


def _contents(archive: Path, limits: Limits, cap: _Cap) -> dict[str, _Entry]:
    """What the archive unpacks to, by relative name: each file's size and sha256,
    ``None`` for a directory (named, or holding a file). Read, never written."""
    contents: dict[str, _Entry] = {}
    with tarfile.open(archive, "r:*") as tar:
        for member in _checked_members(tar, limits, cap):
            parts = PurePosixPath(member.name).parts
            for depth in range(1, len(parts)):
                contents.setdefault("/".join(parts[:depth]), None)
            name = "/".join(parts)
            if member.isdir():
                contents.setdefault(name, None)
                continue
            source = tar.extractfile(member)
            if not parts or name in contents or source is None:
                raise ArchiveError(f"the archive member {member.name!r} cannot be unpacked")
            with source:
                contents[name] = (member.size, _sha256(source))
    contents.pop("", None)
    return contents


def _matches(root: Path, contents: dict[str, _Entry]) -> bool:
    """Whether the tree under ``root`` is ``contents``: plain files and directories only,
    with the same names, sizes and bytes, and nothing else."""
    seen = 0
    pending = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                name = prefix + entry.name
                if name not in contents:
                    return False
                expected = contents[name]
                seen += 1
                if entry.is_dir(follow_symlinks=False) and expected is None:
                    pending.append((Path(entry.path), name + "/"))
                elif not (entry.is_file(follow_symlinks=False) and expected is not None):
                    return False  # a link, a special file, or a file and a directory swapped
                elif entry.stat(follow_symlinks=False).st_size != expected[0]:
                    return False
                else:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as handle:
                        if _sha256(handle) != expected[1]:
                            return False
    return seen == len(contents)


def _sha256(source: IO[bytes]) -> str:
    hasher = hashlib.sha256()
    while chunk := source.read(_CHUNK):
        hasher.update(chunk)
    return hasher.hexdigest()


def _discard(target: Path) -> None:
    """Remove what stands where an unpacked model goes: a link or a file is unlinked (never
    followed); a directory is first moved aside, so no reader sees it half-removed."""
    if target.is_symlink() or not target.is_dir():
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        return
    aside = target.with_name(f".unpack-stale-{secrets.token_hex(8)}")
    try:
        os.replace(target, aside)
    except FileNotFoundError:
        return  # another replica removed it first
    shutil.rmtree(aside, ignore_errors=True)


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
