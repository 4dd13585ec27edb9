"""Image fixtures: the wine example's images, built as a user builds them, once per session.

`streamflow build` makes two images: the streamflow image (what the operator's
pod runs: `operator manifests --image`) and the application's image (what
its streamlets' pods and its verifier Job run: `deploy --image`). Both are
built here with the CLI, exactly as the README tells a platform engineer, and
written as OCI archives that a node's containerd imports.

Everything expensive is cached per machine by the build itself (content tags in
buildah's storage, TensorFlow's wheels in pip's cache), so a second session
finds both images up to date in seconds. The example's models are trained into
the blueprint's directory first when they are missing, as `./dev models` does,
because the application's image carries them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["BuiltImages", "wine_images", "wine_models_in_place"]

ROOT = Path(__file__).resolve().parents[1]
WINE = ROOT / "blueprints" / "wine"
CLASSIFIER = WINE / "classifier.yaml"
_BUILD_TIMEOUT_S = 1800.0  # cold: the base image, TensorFlow's wheels, two images


@dataclass(frozen=True)
class BuiltImages:
    operator: str  # the streamflow image's reference
    operator_archive: Path
    app: str  # the wine classifier's image reference
    app_archive: Path


@pytest.fixture(scope="session")
def wine_models_in_place() -> Path:
    """`blueprints/wine/models`, trained there when missing (the app image carries it)."""
    models = WINE / "models"
    if not (models / "wine-v3.keras").is_file():  # train.py writes v3 last
        # trained outside the project (on its file system), then moved in: a test that
        # reads the wine example's files meanwhile (`build --dry-run` hashes them) never
        # meets a file still being written (CI saw a FileNotFoundError from one)
        partial = Path(tempfile.mkdtemp(prefix="streamflow-wine-models-", dir=ROOT.parent))
        try:
            subprocess.run(
                [sys.executable, str(WINE / "train.py"), "--out", str(partial)],
                check=True,
                timeout=600,
            )
            models.mkdir(exist_ok=True)
            for entry in sorted(partial.iterdir(), key=lambda p: p.name == "wine-v3.keras"):
                target = models / entry.name
                if target.is_dir():
                    shutil.rmtree(target)
                os.replace(entry, target)  # the file that says "done" goes last
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return models


def _build(*args: str) -> str:
    """`streamflow build ARGS`; the reference it prints on stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", "build", *args],
        capture_output=True,
        text=True,
        timeout=_BUILD_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"streamflow build {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def wine_images(
    wine_models_in_place: Path, tmp_path_factory: pytest.TempPathFactory
) -> BuiltImages:
    """Both images of the wine classifier, built and written as OCI archives."""
    subprocess.run([str(ROOT / "tools" / "images" / "build")], check=True, timeout=900)
    out = tmp_path_factory.mktemp("images")
    operator_archive, app_archive = out / "streamflow.oci.tar", out / "wine.oci.tar"
    operator = _build("--operator", "--output", f"oci-archive:{operator_archive}")
    app = _build(str(CLASSIFIER), "--output", f"oci-archive:{app_archive}")
    return BuiltImages(operator, operator_archive, app, app_archive)
