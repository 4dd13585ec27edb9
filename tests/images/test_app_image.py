"""The wine example's application image, built with buildah and run the way a pod runs it.

It builds the base image (tools/images/build) and ``streamflow build
blueprints/wine/classifier.yaml``, both cached on the machine (a second run
finds them up to date), then runs the image's root filesystem as a pod would:
uid 10001, a read-only root, an empty /tmp as HOME, the blueprint's directory
as the working directory. There, the CLI starts, the blueprint verifies
(classes and schemas found under /app), and the Keras model the example
publishes loads with TensorFlow. ``streamflow build --operator`` then finds
the streamflow image that build made (no second build) and writes its OCI
archive.

Needs buildah and root (to mount the image and chroot into it); fails without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamflow.cli.images import builders

ROOT = Path(__file__).resolve().parents[2]
WINE = ROOT / "blueprints" / "wine"

pytestmark = [
    pytest.mark.timeout(1800),  # cold: the base, TensorFlow's wheels, two images (minutes)
]


@pytest.fixture(autouse=True, scope="module")
def _builder_here() -> None:
    """Fails (never skips) without what the test needs, saying how to get it."""
    if shutil.which("buildah") is None:
        pytest.fail("buildah is not installed: tools/images/build installs it", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("mounting an image and chroot need root", pytrace=False)


PROBE = """
import os, sys
assert os.getuid() == 10001 and os.getcwd() == "/app/blueprints/wine", (os.getuid(), os.getcwd())
sys.path.insert(0, os.getcwd())
import classifier_app
import keras
model = keras.models.load_model("models/wine-v1.keras")
print("probe:", classifier_app.WineClassifier.__name__, tuple(model.inputs[0].shape))
"""

# A pod's view of the image: its own mount namespace, the image read-only, /tmp
# an empty tmpfs (the emptyDir), /proc, and the usual device nodes.
SANDBOX = r"""
set -e
root=$1; shift
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o size=64m tmpfs "$root/tmp"
mount -t proc proc "$root/proc"
mount -t tmpfs -o size=1m tmpfs "$root/dev"
for node in null zero random urandom; do
  touch "$root/dev/$node"
  mount --bind "/dev/$node" "$root/dev/$node"
done
exec chroot --userspec=10001:10001 "$root" /usr/bin/env -i HOME=/tmp \
  PATH=/opt/streamflow/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 \
  /bin/sh -c 'cd /app/blueprints/wine && "$@"' sh "$@"
"""


def _buildah(*args: str) -> list[str]:
    """buildah on the storage `streamflow build` used (its driver's folders)."""
    return [*builders.find_builder("buildah", storage=builders.images_dir()).base(), *args]


@pytest.fixture(scope="module")
def wine_build(wine_models_in_place: Path) -> subprocess.CompletedProcess[str]:
    subprocess.run([str(ROOT / "tools" / "images" / "build")], check=True, timeout=900)
    result = subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", "build", str(WINE / "classifier.yaml")],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def wine_image(wine_build: subprocess.CompletedProcess[str]) -> str:
    return wine_build.stdout.strip().splitlines()[-1]


# one container for the module: with vfs, making one copies the whole image
@pytest.fixture(scope="module")
def rootfs(wine_image: str) -> Iterator[Path]:
    made = subprocess.run(
        _buildah("from", "--pull-never", wine_image), capture_output=True, text=True, check=True
    )
    container = made.stdout.strip()
    try:
        mounted = subprocess.run(
            _buildah("mount", container), capture_output=True, text=True, check=True
        )
        yield Path(mounted.stdout.strip())
    finally:
        subprocess.run(_buildah("rm", container), capture_output=True, check=False)


def _in_pod(root: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--mount", "--fork", "sh", "-c", SANDBOX, "sandbox", str(root), *command],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_image_is_the_wine_apps(wine_image: str) -> None:
    assert wine_image.startswith("localhost/streamflow/wine-classifier:")


def test_the_cli_runs_as_the_pod_user_on_a_read_only_root(rootfs: Path) -> None:
    result = _in_pod(rootfs, "sh", "-c", "streamflow --help && touch /app/x")
    assert "Usage" in result.stdout, result.stderr[-2000:]
    assert "Read-only file system" in result.stderr


def test_the_blueprint_verifies_inside_the_image(rootfs: Path) -> None:
    result = _in_pod(rootfs, "streamflow", "verify", "classifier.yaml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_the_classes_import_and_the_keras_model_loads(rootfs: Path) -> None:
    result = _in_pod(rootfs, "python", "-c", PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "probe: WineClassifier (None, 13)" in result.stdout


def test_the_operators_image_is_the_one_the_app_built_on(
    wine_build: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    named = [
        line for line in wine_build.stderr.splitlines() if "operator manifests --image" in line
    ]
    assert named, wine_build.stderr[-2000:]
    archive = tmp_path / "streamflow.tar"
    command = ["build", "--operator", "--output", f"oci-archive:{archive}"]
    result = subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    reference = result.stdout.strip()
    assert reference.startswith("localhost/streamflow:") and named[0].endswith(reference)
    assert "is up to date" in result.stderr  # the application's build made it
    with tarfile.open(archive) as tar:
        assert "index.json" in tar.getnames()
