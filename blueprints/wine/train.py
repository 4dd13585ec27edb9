"""Train the wine classifier that the model-serving examples, tests and benchmarks serve.

Why this model: it is the smallest real TensorFlow model that still behaves like
one (float inputs of different scales, softmax probabilities, two versions that
disagree a little), and it trains in seconds on a CPU from data that ships inside
scikit-learn, so nothing is downloaded.

Choices, each for a reason:

* The features are standardised by a Keras `Normalization` layer adapted on the
  training rows, so every artifact takes the raw measurements: a stream carries
  `WineFeatures` as measured, and no pre-processing lives outside the model.
* Versions 1 and 2 (different seeds and layer sizes) give the live model switch
  something to switch between whose outputs visibly differ.
* Each version is written twice: a Keras 3 `.keras` file (loadable with
  `safe_mode=True`, i.e. no pickled code) and a TF SavedModel directory from
  `model.export()`, whose `serving_default` signature TF Serving and KServe read.
* Seeds are fixed, so a run gives the same weights on the same machine.

    python blueprints/wine/train.py --out DIR [--version 1|2|3|all] [--epochs N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up banner quiet

import numpy as np

if TYPE_CHECKING:  # imported where a model is built: the names and the data need no Keras
    import keras

__all__ = [
    "CLASSES",
    "FEATURES",
    "VERSIONS",
    "WineFrame",
    "accuracy",
    "export",
    "load_wine_frame",
    "main",
    "sample_rows",
    "split",
    "train_model",
    "write_samples",
]


def _snake_case(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


# sklearn's feature names, in its column order, as Avro-safe snake_case.
FEATURES: list[str] = [
    _snake_case(name)
    for name in (
        "alcohol",
        "malic_acid",
        "ash",
        "alcalinity_of_ash",
        "magnesium",
        "total_phenols",
        "flavanoids",
        "nonflavanoid_phenols",
        "proanthocyanins",
        "color_intensity",
        "hue",
        "od280/od315_of_diluted_wines",
        "proline",
    )
]
CLASSES = 3
INPUT_NAME = "features"
OUTPUT_NAME = "probabilities"
_SPLIT_SEED = 7  # the train/test split is the same for every version


class Version(NamedTuple):
    """What distinguishes one model version from another.

    A NamedTuple, not a dataclass: tests load this file by path, and dataclasses
    need the module registered in sys.modules while the class is built.
    """

    seed: int
    hidden: tuple[int, ...]
    epochs: int | None = None  # None: as many as asked for


VERSIONS: dict[int, Version] = {
    1: Version(seed=1, hidden=(16,)),
    2: Version(seed=2, hidden=(32, 16)),
    # worse on purpose, for the rollout example's rollback: a tiny net, barely trained
    3: Version(seed=3, hidden=(2,), epochs=1),
}


class WineFrame(NamedTuple):
    """The wine data set as arrays: `x` is float32 [178, 13] in FEATURES order, `y` int [178]."""

    x: np.ndarray
    y: np.ndarray


def load_wine_frame() -> WineFrame:
    """sklearn's wine data (178 wines, 13 measurements, 3 cultivars), checked against FEATURES."""
    from sklearn.datasets import load_wine  # imported here: only training needs sklearn

    data = load_wine()
    names = [_snake_case(name) for name in data.feature_names]
    if names != FEATURES:
        raise RuntimeError(f"sklearn's wine features changed: {names}")
    return WineFrame(x=data.data.astype(np.float32), y=data.target.astype(np.int64))


def split(frame: WineFrame, *, test_fraction: float = 0.25) -> tuple[WineFrame, WineFrame]:
    """A seeded, stratified train/test split, so every version sees the same rows."""
    rng = np.random.default_rng(_SPLIT_SEED)
    test_rows: list[int] = []
    for label in range(CLASSES):
        rows = np.flatnonzero(frame.y == label)
        test_rows.extend(rng.permutation(rows)[: round(len(rows) * test_fraction)].tolist())
    is_test = np.zeros(len(frame.y), dtype=bool)
    is_test[test_rows] = True
    return (
        WineFrame(frame.x[~is_test], frame.y[~is_test]),
        WineFrame(frame.x[is_test], frame.y[is_test]),
    )


def train_model(version: int = 1, epochs: int = 60) -> keras.Model:
    """Train one version on the training split: raw features in, class probabilities out."""
    import keras

    spec = VERSIONS[version]
    keras.utils.set_random_seed(spec.seed)
    train, _ = split(load_wine_frame())
    normalise = keras.layers.Normalization(name="standardise")
    normalise.adapt(train.x)
    inputs = keras.Input(shape=(len(FEATURES),), name=INPUT_NAME, dtype="float32")
    hidden = normalise(inputs)
    for index, units in enumerate(spec.hidden):
        hidden = keras.layers.Dense(units, activation="relu", name=f"hidden_{index}")(hidden)
    outputs = keras.layers.Dense(CLASSES, activation="softmax", name=OUTPUT_NAME)(hidden)
    model = keras.Model(inputs, outputs, name=f"wine_v{version}")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    epochs = spec.epochs or epochs
    model.fit(train.x, train.y, epochs=epochs, batch_size=16, shuffle=True, verbose=0)
    return model


def accuracy(model: keras.Model, frame: WineFrame) -> float:
    predicted = np.argmax(model.predict(frame.x, verbose=0), axis=1)
    return float(np.mean(predicted == frame.y))


def export(model: keras.Model, *, out: Path, version: int) -> tuple[Path, Path]:
    """Write `wine-v{N}.keras` and the SavedModel dir `wine-v{N}/`; return both paths."""
    out.mkdir(parents=True, exist_ok=True)
    keras_file = out / f"wine-v{version}.keras"
    saved_model = out / f"wine-v{version}"
    with warnings.catch_warnings():
        # Keras 3.15 saves variables through np.array(), which NumPy 2 flags as deprecated.
        warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
        model.save(keras_file)
        model.export(str(saved_model), format="tf_saved_model", verbose=False)
    return keras_file, saved_model


def sample_rows(frame: WineFrame, *, seed: int = 0) -> list[dict[str, Any]]:
    """Every wine as a `WineFeatures`-shaped dict, shuffled so a stream mixes the classes.

    The id keeps the row's index in sklearn's order, so a record can be traced back.
    Values are the shortest decimals that round to the float32 the model sees (14.23,
    not 14.229999542236328), so the JSON reads like the data set and converts back exactly.
    """
    order = np.random.default_rng(seed).permutation(len(frame.y))
    return [
        {
            "id": f"wine-{int(row):03d}",
            **{name: _shortest(value) for name, value in zip(FEATURES, frame.x[row], strict=True)},
            "label": int(frame.y[row]),
        }
        for row in order
    ]


def _shortest(value: np.float32) -> float:
    return float(np.format_float_positional(np.float32(value), trim="-"))


def write_samples(path: Path) -> Path:
    """Write `sample_rows()` as JSON lines, the input of the model-serving examples."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in sample_rows(load_wine_frame())))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the artifacts")
    parser.add_argument("--version", choices=[*map(str, VERSIONS), "all"], default="all")
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args(argv)
    versions = list(VERSIONS) if args.version == "all" else [int(args.version)]
    _, test = split(load_wine_frame())
    for version in versions:
        started = time.perf_counter()
        model = train_model(version, args.epochs)
        keras_file, saved_model = export(model, out=args.out, version=version)
        print(
            f"wine v{version}: test accuracy {accuracy(model, test):.3f} "
            f"({len(test.y)} wines), {time.perf_counter() - started:.1f} s -> "
            f"{keras_file}, {saved_model}/"
        )
    print(f"samples -> {write_samples(args.out / 'wine-sample.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
