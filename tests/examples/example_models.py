"""The digits and reviews example models, trained once per test session by their own train.py.

As `tests/model_fixtures.py` does for wine, these fixtures run the very script a
user runs (loaded by path: blueprints/ is not a package) into a session tmp dir,
so the tests serve the same artifacts the examples do. Training takes seconds
on a CPU, with fixed seeds.

A fixture can be found by pytest in more than one place (this folder's conftest,
and test modules elsewhere that import it); the trained models are cached in
this module, so a session trains each example once however many ask.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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
    """The digits CNN, both versions, trained and exported once per session."""
    if "digits" not in _trained:
        train = load_trainer(DIGITS)
        out = tmp_path_factory.mktemp("digits-models")
        frame = train.load_digits_frame()
        models = {version: train.train_model(version) for version in train.VERSIONS}
        files = {v: train.export(m, out=out, version=v) for v, m in models.items()}
        _trained["digits"] = DigitsModels(
            dir=out,
            keras_files={version: keras_file for version, (keras_file, _) in files.items()},
            models=models,
            saved_model=files[1][1],
            onnx_file=train.export_onnx(models[1], out=out, version=1, check=frame),
            samples=train.write_samples(out / "digits-sample.jsonl"),
            samples_bytes=train.write_samples(out / "digits-sample-bytes.jsonl", raw=True),
            x=frame.x,
            y=frame.y,
        )
    digits: DigitsModels = _trained["digits"]
    return digits


@pytest.fixture(scope="session")
def reviews_model(tmp_path_factory: pytest.TempPathFactory) -> ReviewsModel:
    """The review-sentiment model, trained and exported once per session."""
    if "reviews" not in _trained:
        train = load_trainer(REVIEWS)
        out = tmp_path_factory.mktemp("reviews-models")
        model = train.train_model()
        keras_file, saved_model = train.export(model, out=out)
        train.check_artifact(keras_file, model)
        frame = train.load_reviews_frame()
        _trained["reviews"] = ReviewsModel(
            dir=out,
            keras_file=keras_file,
            saved_model=saved_model,
            model=model,
            samples=train.write_samples(out / "reviews-sample.jsonl"),
            x=frame.x,
            y=frame.y,
        )
    reviews: ReviewsModel = _trained["reviews"]
    return reviews
