"""The digits and reviews example models, trained once per test session by their own train.py.

As `tests/model_fixtures.py` does for wine, these fixtures run the very script a
user runs (loaded by path: blueprints/ is not a package) into a session tmp dir,
so the tests serve the same artifacts the examples do. Training takes seconds
on a CPU, with fixed seeds.

A fixture can be found by pytest in more than one place (this folder's conftest,
and test modules elsewhere that import it); the trained models are cached in
this module, so a session loads each example once however many ask; and the training
itself happens once per test run, in whichever xdist worker asks first (`tests.built_once`).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.built_once import built_once

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "blueprints" / "digits"
REVIEWS = ROOT / "blueprints" / "reviews"

_trained: dict[str, Any] = {}


def load_trainer(example: Path) -> ModuleType:
    """`example/train.py` as a module, with its folder importable for its sibling modules."""
    name = f"streamflow_blueprints_{example.name}_train"
    if (module := sys.modules.get(name)) is not None:
        return module
    for needed in ("keras", "sklearn", "onnx", "onnxruntime"):
        if importlib.util.find_spec(needed) is None:
            pytest.fail(
                f"{needed} is missing: the example models need the tf, onnx and examples "
                "extras (./dev setup installs them)",
                pytrace=False,
            )
    if str(example) not in sys.path:
        sys.path.insert(0, str(example))
    spec = importlib.util.spec_from_file_location(name, example / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class DigitsModels:
    """Both versions as `.keras` files, version 1 as a SavedModel and ONNX, and the samples."""

    dir: Path
    keras_files: dict[int, Path]
    models: dict[int, Any]  # keras.Model by version
    saved_model: Path
    onnx_file: Path
    samples: Path
    samples_bytes: Path
    x: Any  # float32 [1797, 8, 8, 1]
    y: Any  # int64 [1797]


@dataclass(frozen=True)
class ReviewsModel:
    """Version 1 as a `.keras` file and a SavedModel, the samples, and the corpus as arrays."""

    dir: Path
    keras_file: Path
    saved_model: Path
    model: Any
    samples: Path
    x: Any  # object [3000] of str
    y: Any  # int64 [3000]


@pytest.fixture(scope="session")
def digits_models(tmp_path_factory: pytest.TempPathFactory) -> DigitsModels:
    """The digits CNN, both versions, trained and exported once per test run."""
    if "digits" not in _trained:
        train = load_trainer(DIGITS)
        frame = train.load_digits_frame()

        def build(out: Path) -> dict[str, Any]:
            models = {version: train.train_model(version) for version in train.VERSIONS}
            files = {v: train.export(m, out=out, version=v) for v, m in models.items()}
            onnx_file = train.export_onnx(models[1], out=out, version=1, check=frame)
            return {
                "keras_files": {v: keras_file.name for v, (keras_file, _) in files.items()},
                "saved_model": files[1][1].name,
                "onnx_file": onnx_file.name,
                "samples": train.write_samples(out / "digits-sample.jsonl").name,
                "samples_bytes": train.write_samples(
                    out / "digits-sample-bytes.jsonl", raw=True
                ).name,
            }

        out, built = built_once(tmp_path_factory, "digits-models", build)
        keras_files = {int(v): out / name for v, name in built["keras_files"].items()}
        _trained["digits"] = DigitsModels(
            dir=out,
            keras_files=keras_files,
            models={v: _load(path) for v, path in keras_files.items()},
            saved_model=out / built["saved_model"],
            onnx_file=out / built["onnx_file"],
            samples=out / built["samples"],
            samples_bytes=out / built["samples_bytes"],
            x=frame.x,
            y=frame.y,
        )
    digits: DigitsModels = _trained["digits"]
    return digits


@pytest.fixture(scope="session")
def reviews_model(tmp_path_factory: pytest.TempPathFactory) -> ReviewsModel:
    """The review-sentiment model, trained and exported once per test run."""
    if "reviews" not in _trained:
        train = load_trainer(REVIEWS)

        def build(out: Path) -> dict[str, Any]:
            model = train.train_model()
            keras_file, saved_model = train.export(model, out=out)
            train.check_artifact(keras_file, model)
            samples = train.write_samples(out / "reviews-sample.jsonl")
            return {
                "keras": keras_file.name,
                "saved_model": saved_model.name,
                "samples": samples.name,
            }

        out, built = built_once(tmp_path_factory, "reviews-models", build)
        frame = train.load_reviews_frame()
        _trained["reviews"] = ReviewsModel(
            dir=out,
            keras_file=out / built["keras"],
            saved_model=out / built["saved_model"],
            model=_load(out / built["keras"]),
            samples=out / built["samples"],
            x=frame.x,
            y=frame.y,
        )
    reviews: ReviewsModel = _trained["reviews"]
    return reviews


def _load(keras_file: Path) -> Any:
    """A Keras model from the file the run's training wrote (loaded in this worker)."""
    import keras

    return keras.models.load_model(keras_file)
