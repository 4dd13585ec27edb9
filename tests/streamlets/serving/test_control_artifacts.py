"""Hostile artifacts: slow and huge downloads, archive bombs, escaping members (issue 10, 7-8).

A descriptor's location may name a host that drips its answer or never stops
sending, and an archive may unpack to far more than it weighs. A replica must
give up at a byte cap and an overall deadline, count an archive's members
before writing any of them, and leave nothing half-unpacked behind.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamflow.models import artifacts
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s
from tests.streamlets.serving.hostile_servers import hostile

MiB = 1 << 20
ANY_DIGEST = "ab" * 32

# -- 7. downloads: an overall deadline and a byte cap ---------------------------------


def test_a_dripping_download_stops_at_the_overall_deadline(tmp_path: Path) -> None:
    body = b"y" * 60
    with hostile() as server:
        server.drip("/m.keras", body, every=0.3)  # every read succeeds; 18 s in all
        h = s.harness(tmp_path, download_timeout="2s", timeout="1s")
        descriptor = s.descriptor(
            1, "KERAS", location=server.url + "/m.keras", sha256=hashlib.sha256(body).hexdigest()
        )
        started = time.monotonic()
        h.control("model", descriptor)
        status = s.settle(h, 1, timeout=30)
        took = time.monotonic() - started
    assert status["state"] == "failed", status
    assert took < 6, f"the download went on for {took:.1f}s against a 2s deadline"
    assert "2s" in status["message"] or "deadline" in status["message"], status["message"]


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "no-length"])
def test_a_huge_download_is_cut_at_max_artifact_bytes(tmp_path: Path, declare: bool) -> None:
    with hostile() as server:
        server.huge("/big.keras", 512 * MiB, declare=declare)
        h = s.harness(tmp_path, max_artifact_bytes=MiB)
        h.control(
            "model", s.descriptor(1, "KERAS", location=server.url + "/big.keras", sha256=ANY_DIGEST)
        )
        status = s.settle(h, 1, timeout=60)
        time.sleep(0.5)
        sent = server.bytes_sent("/big.keras")
    assert status["state"] == "failed", status
    assert "max_artifact_bytes" in status["message"], status["message"]
    assert sent < 64 * MiB, f"the replica read {sent / MiB:.0f} MiB of a 1 MiB cap"
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".partial")]


def test_an_inline_artifact_over_the_cap_is_refused(tmp_path: Path) -> None:
    h = s.harness(tmp_path, max_artifact_bytes=1024)
    h.control("model", s.descriptor(1, "KERAS", data=b"\0" * 4096))
    status = s.settle(h, 1)
    assert status["state"] == "failed" and "max_artifact_bytes" in status["message"], status


# -- 8. unpacking: counted before extracted, cleaned up, evicted ------------------------


def _tar_gz(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, payload in members:
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return gzip.compress(raw.getvalue(), compresslevel=9)


def _file(name: str, size: int) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = size
    return info, b"\0" * size


def _bomb() -> bytes:
    return _tar_gz([_file("saved_model.pb", 64 * MiB)])


def _many_files() -> bytes:
    return _tar_gz([_file(f"assets/f{i}", 0) for i in range(3000)] + [_file("saved_model.pb", 1)])


def _dotdot() -> bytes:
    return _tar_gz([_file("../escaped.txt", 3), _file("saved_model.pb", 1)])


def _symlink() -> bytes:
    link = tarfile.TarInfo("assets")
    link.type = tarfile.SYMTYPE
    link.linkname = "../../.."
    return _tar_gz([(link, None), _file("assets/escaped.txt", 3), _file("saved_model.pb", 1)])


@pytest.mark.parametrize(
    ("archive", "reason"),
    [
        (_bomb, "max_unpacked_bytes"),
        (_many_files, "max_unpacked_files"),
        (_dotdot, "outside"),
        (_symlink, "link"),
    ],
    ids=["tar-bomb", "many-files", "dotdot-member", "symlink-member"],
)
def test_a_hostile_savedmodel_archive_is_refused_before_anything_is_written(
    tmp_path: Path, archive: object, reason: str
) -> None:
    data = archive()  # type: ignore[operator]
    h = s.harness(
        tmp_path, allow_saved_model=True, max_unpacked_bytes=8 * MiB, max_unpacked_files=1000
    )
    h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=data))
    status = s.settle(h, 1)
    assert status["state"] == "failed", status
    assert reason in status["message"], status["message"]
    cache = tmp_path / "cache"
    leftovers = [p.name for p in cache.iterdir() if p.is_dir()]
    assert leftovers == [], leftovers  # no unpacked or half-unpacked directory stays
    assert not list(tmp_path.rglob("escaped.txt"))


def _zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("metadata.json", "{}")
        archive.writestr("config.json", b" " * (64 * MiB))
    return buffer.getvalue()


def test_a_keras_zip_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    h = s.harness(tmp_path, max_unpacked_bytes=8 * MiB)
    h.control("model", s.descriptor(1, "KERAS", data=_zip_bomb()))
    status = s.settle(h, 1)
    assert status["state"] == "failed", status
    assert "max_unpacked_bytes" in status["message"], status["message"]


def test_old_cache_entries_are_evicted_past_keep_versions(
    tmp_path: Path, wine_models: WineModels
) -> None:
    h = s.harness(tmp_path, keep_versions=1)
    v1 = wine_models.v1.keras_file.read_bytes()
    v2 = wine_models.v2.keras_file.read_bytes()
    h.control("model", s.descriptor(1, "KERAS", data=v1))
    assert s.settle(h, 1)["state"] == "serving"
    time.sleep(0.05)  # distinct modification times
    h.control("model", s.descriptor(2, "KERAS", data=v2))
    assert s.settle(h, 2)["state"] == "serving"
    names = {p.name for p in (tmp_path / "cache").iterdir()}
    assert hashlib.sha256(v1).hexdigest() not in names, names
    assert hashlib.sha256(v2).hexdigest() in names, names


class _SeenThenGone(type(Path())):  # type: ignore[misc]
    """A cache entry another replica evicts right after this one first looks at it."""

    looked = False

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        status = super().stat(follow_symlinks=follow_symlinks)
        if not self.looked:
            self.looked = True
            os.unlink(self)  # the other replica's eviction, between two looks of ours
        return status


def test_two_replicas_evicting_the_same_cache_at_once_both_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # replicas on one machine share the cache, load the same descriptor and evict at the
    # same moment: an entry this one lists may be gone when it looks at its age (the CI
    # failure of a two-replica push over SASL: FileNotFoundError on an old digest)
    cache = tmp_path / "cache"
    cache.mkdir()
    digests = [f"{i:x}" * 64 for i in range(1, 5)]
    for age, digest in enumerate(digests):
        (cache / digest).write_bytes(b"model")
        os.utime(cache / digest, (1_000_000 - age, 1_000_000 - age))  # the first is newest
    listing = Path.iterdir

    def racing(self: Path) -> Iterator[Path]:
        for entry in listing(self):
            old = self == cache and entry.name in digests[1:]
            yield _SeenThenGone(entry) if old else entry

    monkeypatch.setattr(Path, "iterdir", racing)
    artifacts.evict(cache, keep=1)
    monkeypatch.undo()
    assert sorted(p.name for p in cache.iterdir()) == [digests[0]]


def test_a_cache_hit_evicted_before_it_is_read_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = b"model bytes"
    digest = hashlib.sha256(body).hexdigest()
    cache = tmp_path / "cache"
    artifacts.private_dir(cache)
    (cache / digest).write_bytes(body)
    opening = Path.open

    def evicted_first(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == cache / digest:
            os.unlink(self)  # another replica's eviction, after our is_file and before open
        return opening(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", evicted_first)
    with hostile() as server:
        server.body("/m.keras", body)
        path = artifacts.fetch(
            data=None,
            location=server.url + "/m.keras",
            sha256=digest,
            allowlist=[server.url],
            cache_dir=cache,
        )
    monkeypatch.undo()
    assert path == cache / digest
    assert path.read_bytes() == body


def test_a_model_that_loaded_is_served_even_when_evicting_old_artifacts_fails(
    tmp_path: Path, wine_models: WineModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(cache_dir: Path, *, keep: int) -> list[str]:
        raise PermissionError(13, "Permission denied", str(cache_dir / ANY_DIGEST))

    monkeypatch.setattr(artifacts, "evict", refused)
    h = s.harness(tmp_path)
    h.control("model", s.descriptor(1, "KERAS", data=wine_models.v1.keras_file.read_bytes()))
    status = s.settle(h, 1)
    assert status["state"] == "serving", status


def test_unpack_limits_are_checked_on_the_archive_alone(tmp_path: Path) -> None:
    archive = tmp_path / "bomb"
    archive.write_bytes(_bomb())
    with pytest.raises(artifacts.ArtifactError, match="max_unpacked_bytes"):
        artifacts.unpack(archive, into=tmp_path, limits=artifacts.Limits(unpacked_bytes=MiB))
    assert [p.name for p in tmp_path.iterdir()] == ["bomb"]


def _zeros_tar_gz(size: int) -> bytes:
    return _tar_gz(
        [_file("variables/variables.data-00000-of-00001", size), _file("saved_model.pb", 1)]
    )


def test_a_bomb_within_the_byte_cap_is_refused_by_its_ratio_with_nothing_written(
    tmp_path: Path,
) -> None:
    """65 MiB of zeros gzip to 65 KB: within the 4 GiB default, a thousand times its size."""
    archive = tmp_path / "ratio-bomb"
    archive.write_bytes(_zeros_tar_gz(65 * MiB))
    assert archive.stat().st_size < MiB
    with pytest.raises(artifacts.ArtifactError, match="max_unpack_ratio") as refused:
        artifacts.unpack(archive, into=tmp_path, limits=artifacts.Limits())
    assert "100 times its own" in str(refused.value)
    assert [p.name for p in tmp_path.iterdir()] == ["ratio-bomb"]
    # an archive of the same bytes that compresses as models do is accepted
    accepted = artifacts.unpack(archive, into=tmp_path, limits=artifacts.Limits(unpack_ratio=2000))
    assert (accepted / "saved_model.pb").is_file()


def test_a_ratio_bomb_through_the_control_topic_leaves_no_debris(tmp_path: Path) -> None:
    h = s.harness(tmp_path, allow_saved_model=True)  # the default limits
    h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=_zeros_tar_gz(65 * MiB)))
    status = s.settle(h, 1)
    assert status["state"] == "failed", status
    assert "max_unpack_ratio" in status["message"], status["message"]
    assert [p for p in (tmp_path / "cache").iterdir() if p.is_dir()] == []


def test_an_archive_without_saved_model_pb_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    archive = tmp_path / "no-model"
    archive.write_bytes(_tar_gz([_file("assets/vocab.txt", 1000), _file("variables/x", 10)]))
    with pytest.raises(artifacts.ArtifactError, match=r"no saved_model\.pb"):
        artifacts.unpack(archive, into=tmp_path, limits=artifacts.Limits())
    assert [p.name for p in tmp_path.iterdir()] == ["no-model"]


def test_a_truncated_archive_is_refused_while_writing_and_cleaned_up(tmp_path: Path) -> None:
    """The headers add up, but the bytes end early: what was written goes too."""
    whole = gzip.decompress(_zeros_tar_gz(2 * MiB))
    archive = tmp_path / "truncated"
    archive.write_bytes(whole[: MiB + 4096])
    with pytest.raises(artifacts.ArtifactError, match="not a readable SavedModel archive"):
        artifacts.unpack(archive, into=tmp_path, limits=artifacts.Limits())
    assert [p.name for p in tmp_path.iterdir()] == ["truncated"]


def test_a_member_name_given_twice_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "twice"
    archive.write_bytes(_tar_gz([_file("saved_model.pb", 5), _file("saved_model.pb", 7)]))
    with pytest.raises(artifacts.ArtifactError, match="not a readable SavedModel archive"):
        artifacts.unpack(archive, into=tmp_path, limits=artifacts.Limits())
    assert [p.name for p in tmp_path.iterdir()] == ["twice"]


def test_a_keras_zip_bomb_within_the_byte_cap_is_refused_by_its_ratio(tmp_path: Path) -> None:
    path = tmp_path / "bomb.keras"
    path.write_bytes(_zip_bomb())  # 64 MiB of spaces in about 64 KB
    with pytest.raises(artifacts.ArtifactError, match="max_unpack_ratio"):
        artifacts.check_zip(path, limits=artifacts.Limits())
