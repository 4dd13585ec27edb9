"""The image references an archive carries, read before it is imported into the real node.

An archive that already names its image is imported without `--index-name`: the
index blob containerd writes for that flag is what a loaded CI run saw go
missing ("content digest ...: not found"), in three imports in a row.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from streamflow.devkit import _node_host

REF_NAME = "org.opencontainers.image.ref.name"


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_oci_archive_names_what_its_index_annotates(tmp_path: Path) -> None:
    index = {
        "manifests": [
            {"digest": "sha256:1", "annotations": {REF_NAME: "localhost/app:1"}},
            {"digest": "sha256:2"},
            "not an entry",
        ]
    }
    archive = _tar(
        tmp_path / "oci.tar", {"oci-layout": b"{}", "index.json": json.dumps(index).encode()}
    )
    assert _node_host.archive_names(archive) == {"localhost/app:1"}


def test_a_docker_archive_names_its_repo_tags(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "docker.tar", {"manifest.json": b'[{"RepoTags": ["busybox:1", "b:2"]}]'}
    )
    assert _node_host.archive_names(archive) == {"busybox:1", "b:2"}


def test_an_unreadable_archive_names_nothing(tmp_path: Path) -> None:
    garbled = _tar(tmp_path / "garbled.tar", {"index.json": b"{not json"})
    plain = tmp_path / "plain.txt"
    plain.write_text("hello")
    for archive in (garbled, plain, tmp_path / "missing.tar"):
        assert _node_host.archive_names(archive) == set()
