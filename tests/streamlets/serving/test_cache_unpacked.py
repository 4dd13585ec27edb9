"""The unpacked SavedModel in the cache is checked against its archive on every hit.

A SavedModel archive is unpacked once, into ``<digest>.d`` beside it, and a
``<digest>.d`` folder already there was used as it stood: anything that could
write the cache could swap what a verified archive unpacked to, or plant the
folder before the model was ever pushed (security review, finding 3). The
archive is the verified artifact, so the folder must hold exactly its files,
byte for byte, and nothing else; otherwise it is removed and unpacked again.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from streamflow.models import artifacts
from streamflow.models.artifacts import pack_directory
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s

_MODEL = {"saved_model.pb": b"the graph", "variables/variables.index": b"the weights"}


def _model_archive(into: Path) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, content in _MODEL.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    data = gzip.compress(raw.getvalue())
    archive = into / hashlib.sha256(data).hexdigest()
    archive.write_bytes(data)
    return archive


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _tamper(unpacked: Path, how: str, elsewhere: Path) -> None:
    if how == "same-size":
        (unpacked / "saved_model.pb").write_bytes(b"the trick")
    elif how == "grown":
        (unpacked / "saved_model.pb").write_bytes(b"the graph, and then some")
    elif how == "added-file":
        (unpacked / "assets").mkdir()
        (unpacked / "assets" / "planted.txt").write_bytes(b"planted")
    elif how == "removed-file":
        (unpacked / "variables" / "variables.index").unlink()
    elif how == "file-is-a-link":
        (elsewhere / "weights").write_bytes(b"the weights")  # the same bytes, elsewhere
        (unpacked / "variables" / "variables.index").unlink()
        (unpacked / "variables" / "variables.index").symlink_to(elsewhere / "weights")


@pytest.mark.parametrize(
    "how", ["same-size", "grown", "added-file", "removed-file", "file-is-a-link"]
)
def test_a_tampered_unpacked_model_is_unpacked_again(tmp_path: Path, how: str) -> None:
    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    archive = _model_archive(cache)
    unpacked = artifacts.unpack(archive, into=cache)
    _tamper(unpacked, how, elsewhere)
    again = artifacts.unpack(archive, into=cache)
    assert again == unpacked
    assert _files(again) == _MODEL
    assert not any(p.is_symlink() for p in again.rglob("*"))
    assert sorted(p.name for p in cache.iterdir()) == [archive.name, archive.name + ".d"]


@pytest.mark.parametrize("planted", ["folder", "link-to-a-folder", "file"])
def test_a_planted_unpacked_folder_is_not_used(tmp_path: Path, planted: str) -> None:
    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    archive = _model_archive(cache)
    target = cache / (archive.name + ".d")
    (elsewhere / "saved_model.pb").write_bytes(b"a planted graph")
    if planted == "folder":
        target.mkdir()
        (target / "saved_model.pb").write_bytes(b"a planted graph")
    elif planted == "link-to-a-folder":
        target.symlink_to(elsewhere, target_is_directory=True)
    else:
        target.write_bytes(b"not a folder")
    unpacked = artifacts.unpack(archive, into=cache)
    assert unpacked == target and not target.is_symlink()
    assert _files(unpacked) == _MODEL
    assert (elsewhere / "saved_model.pb").read_bytes() == b"a planted graph"  # left alone


def test_an_intact_unpacked_model_is_used_as_it_is(tmp_path: Path) -> None:
    archive = _model_archive(tmp_path)
    first = artifacts.unpack(archive, into=tmp_path)
    inodes = {name: (first / name).stat().st_ino for name in _MODEL}
    again = artifacts.unpack(archive, into=tmp_path)
    assert {name: (again / name).stat().st_ino for name in _MODEL} == inodes


def test_a_savedmodel_planted_under_a_pushed_digest_is_not_served(
    tmp_path: Path, wine_models: WineModels
) -> None:
    """Version 1's SavedModel sits where version 2's archive unpacks: version 2 is served."""
    pushed = pack_directory(wine_models.v2.saved_model)
    cache = tmp_path / "cache"
    artifacts.private_dir(cache)
    planted = cache / (hashlib.sha256(pushed).hexdigest() + ".d")
    shutil.copytree(wine_models.v1.saved_model, planted)
    assert _files(planted) != _files(wine_models.v2.saved_model)
    h = s.harness(tmp_path, allow_saved_model=True)
    h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=pushed))
    status = s.settle(h, 1)
    assert status["state"] == "serving", status
    assert _files(planted) == _files(wine_models.v2.saved_model)
    # what the replica unpacked, and TensorFlow loaded, is used as it is the next time
    inode = (planted / "saved_model.pb").stat().st_ino
    h.control("model", s.descriptor(2, "TF_SAVED_MODEL", data=pushed))
    assert s.settle(h, 2)["state"] == "serving"
    assert (planted / "saved_model.pb").stat().st_ino == inode
