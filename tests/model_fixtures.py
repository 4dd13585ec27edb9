"""Model fixtures: the wine classifier, trained once per session, and a real model server.

`wine_models` trains both versions of blueprints/wine/train.py into a session tmp
dir (a few seconds on a CPU) and exports each as a `.keras` file and a SavedModel.
`model_server` serves version 1's `.keras` file as model "wine" with KServe's
ModelServer (tools/modelserver/.venv, from `tools/modelserver/setup`), shared by
the session: a test that kills, pauses or restarts a server takes its own from
`model_server_factory` instead, so it never disturbs the others.

The trainer needs TensorFlow and scikit-learn in the test environment; without
them these fixtures fail, saying what to install.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from streamflow import devkit

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = ROOT / "blueprints" / "wine" / "train.py"
_MODULE_NAME = "streamflow_blueprints_wine_train"


def load_wine_trainer() -> ModuleType:
    """blueprints/wine/train.py as a module (blueprints/ is not a package), loaded once."""
    if (module := sys.modules.get(_MODULE_NAME)) is not None:
        return module
    for needed in ("keras", "sklearn"):
        if importlib.util.find_spec(needed) is None:
            pytest.fail(
                f"{needed} is missing: the wine model needs the tf and examples extras "
                "(./dev setup installs them)",
                pytrace=False,
            )
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, TRAIN_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class WineModel:
    """One trained version: its artifacts on disk and the Keras model they were saved from."""

    version: int
    keras_file: Path
    saved_model: Path
    model: Any  # keras.Model; Any so this module imports without TensorFlow


@dataclass(frozen=True)
class WineModels:
    """Both versions, the data set's features as float32 `x` [178, 13], and its labels `y`."""

    dir: Path
    versions: dict[int, WineModel]
    samples: Path
    x: Any
    y: Any

    def __getitem__(self, version: int) -> WineModel:
        return self.versions[version]

    @property
    def v1(self) -> WineModel:
        return self.versions[1]

    @property
    def v2(self) -> WineModel:
        return self.versions[2]


@pytest.fixture(scope="session")
def wine_models(tmp_path_factory: pytest.TempPathFactory) -> WineModels:
    """Versions 1 and 2 of the wine classifier, trained and exported once per session."""
    train = load_wine_trainer()
    out = tmp_path_factory.mktemp("wine-models")
    versions: dict[int, WineModel] = {}
    for version in train.VERSIONS:
        model = train.train_model(version)
        keras_file, saved_model = train.export(model, out=out, version=version)
        versions[version] = WineModel(version, keras_file, saved_model, model)
    samples = out / "wine-sample.jsonl"
    train.write_samples(samples)
    frame = train.load_wine_frame()
    return WineModels(dir=out, versions=versions, samples=samples, x=frame.x, y=frame.y)


def _started(server: devkit.ModelServer) -> devkit.ModelServer:
    try:
        server.start()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    return server


@pytest.fixture(scope="session")
def model_server(wine_models: WineModels) -> Iterator[devkit.ModelServer]:
    """KServe's ModelServer serving version 1's `.keras` file as "wine"; shared, do not kill."""
    server = devkit.ModelServer(
        model_path=wine_models.v1.keras_file, model_name="wine", model_version="1"
    )
    yield _started(server)
    server.stop()


@pytest.fixture
def model_server_factory() -> Iterator[Callable[..., devkit.ModelServer]]:
    """`model_server_factory(model_path=..., ...)` starts a server of the test's own.

    It takes ModelServer's keyword arguments; every server it started is stopped after the test.
    """
    started: list[devkit.ModelServer] = []

    def start(**options: Any) -> devkit.ModelServer:
        server = devkit.ModelServer(**options)
        started.append(server)
        return _started(server)

    yield start
    for server in started:
        server.stop()
