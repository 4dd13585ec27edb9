"""Train the digits CNN that the image example serves, and write every artifact it needs.

Why this model: it is the smallest real image model, a convolution over 8x8
greyscale digits from the data set scikit-learn ships (nothing is downloaded),
and it trains in seconds on a CPU. Its input is a named tensor of shape
[8, 8, 1] rather than a row of numbers, which is what the example is about:
records carry images, the tensor mapping turns them into the model's `image`
input, and the `probabilities` output becomes scores, a class and a top-k.

Choices, each for a reason:

* Pixels are scaled from 0..16 to 0..1 here, once, so the samples carry what the
  model takes and no pre-processing lives between the stream and the model.
  Every value is a multiple of 1/16, exact in float32 and short in JSON.
* Two versions (different seeds, filters and epochs) give the live model switch
  something to switch between.
* Version 1 is also written as a SavedModel whose signature names its output
  `probabilities` (`model.export()` would call it `output_0`), and as an ONNX
  graph built by hand from the Keras weights (see `digits_onnx.py`); the script
  fails unless ONNX Runtime agrees with Keras on every image of the data set.
* The samples come twice: pixels as nested 8x8x1 lists, and as the raw
  little-endian float32 tensor (256 bytes, base64 in JSON) for the bytes form.

    python blueprints/digits/train.py --out DIR [--version 1|2|all] [--epochs N]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up banner quiet

import digits_onnx
import keras
import numpy as np

__all__ = [
    "CLASSES",
    "INPUT_NAME",
    "OUTPUT_NAME",
    "SHAPE",
    "VERSIONS",
    "DigitsFrame",
    "accuracy",
    "export",
    "export_onnx",
    "load_digits_frame",
    "main",
    "sample_rows",
    "split",
    "train_model",
    "write_samples",
]

CLASSES = 10
SHAPE = (8, 8, 1)
INPUT_NAME = "image"
OUTPUT_NAME = "probabilities"
ONNX_TOLERANCE = 1e-5
_SPLIT_SEED = 7  # the train/test split is the same for every version


class Version(NamedTuple):
    """What distinguishes one model version from another (a NamedTuple: loaded by path)."""

    seed: int
    filters: int
    dense: int
    epochs: int


VERSIONS: dict[int, Version] = {
    1: Version(seed=1, filters=8, dense=32, epochs=12),
    2: Version(seed=2, filters=16, dense=64, epochs=8),
}


class DigitsFrame(NamedTuple):
    """The digits as arrays: `x` float32 [n, 8, 8, 1] in 0..1, `y` int64 [n]."""

    x: np.ndarray
    y: np.ndarray


def load_digits_frame() -> DigitsFrame:
    """scikit-learn's digits (1,797 images of 8x8 pixels, 0..16), scaled to 0..1."""
    from sklearn.datasets import load_digits  # imported here: only training needs sklearn

    data = load_digits()
    x = (data.images.astype(np.float32) / np.float32(16.0)).reshape(-1, *SHAPE)
    return DigitsFrame(x=x, y=data.target.astype(np.int64))


def split(frame: DigitsFrame, *, test_fraction: float = 0.25) -> tuple[DigitsFrame, DigitsFrame]:
    """A seeded, stratified train/test split, so every version sees the same images."""
    rng = np.random.default_rng(_SPLIT_SEED)
    is_test = np.zeros(len(frame.y), dtype=bool)
    for label in range(CLASSES):
        rows = np.flatnonzero(frame.y == label)
        is_test[rng.permutation(rows)[: round(len(rows) * test_fraction)]] = True
    return (
        DigitsFrame(frame.x[~is_test], frame.y[~is_test]),
        DigitsFrame(frame.x[is_test], frame.y[is_test]),
    )


def train_model(version: int = 1, epochs: int | None = None) -> keras.Model:
    """Train one version on the training split: an image in, ten probabilities out."""
    spec = VERSIONS[version]
    keras.utils.set_random_seed(spec.seed)
    train, _ = split(load_digits_frame())
    inputs = keras.Input(shape=SHAPE, name=INPUT_NAME, dtype="float32")
    conv = keras.layers.Conv2D(spec.filters, 3, padding="same", activation="relu", name="conv")
    hidden = conv(inputs)
    hidden = keras.layers.MaxPooling2D(2, name="pool")(hidden)
    hidden = keras.layers.Flatten(name="flatten")(hidden)
    hidden = keras.layers.Dense(spec.dense, activation="relu", name="hidden")(hidden)
    outputs = keras.layers.Dense(CLASSES, activation="softmax", name=OUTPUT_NAME)(hidden)
    model = keras.Model(inputs, outputs, name=f"digits_v{version}")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.005),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(
        train.x, train.y, epochs=epochs or spec.epochs, batch_size=32, shuffle=True, verbose=0
    )
    return model


def accuracy(model: keras.Model, frame: DigitsFrame) -> float:
    predicted = np.argmax(model.predict(frame.x, verbose=0), axis=1)
    return float(np.mean(predicted == frame.y))


def export(model: keras.Model, *, out: Path, version: int) -> tuple[Path, Path]:
    """Write `digits-v{N}.keras` and the SavedModel dir `digits-v{N}/`; return both paths."""
    import tensorflow as tf

    out.mkdir(parents=True, exist_ok=True)
    keras_file = out / f"digits-v{version}.keras"
    saved_model = out / f"digits-v{version}"
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda image: {OUTPUT_NAME: model(image, training=False)},
        input_signature=[tf.TensorSpec((None, *SHAPE), tf.float32, name=INPUT_NAME)],
    )
    with warnings.catch_warnings():
        # Keras 3.15 saves variables through np.array(), which NumPy 2 flags as deprecated.
        warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
        model.save(keras_file)
        archive.write_out(str(saved_model), verbose=False)
    return keras_file, saved_model


def export_onnx(model: keras.Model, *, out: Path, version: int, check: DigitsFrame) -> Path:
    """Write `digits-v{N}.onnx`, after checking ONNX Runtime agrees with Keras on `check.x`."""
    graph = digits_onnx.keras_to_onnx(model, input_name=INPUT_NAME, output_name=OUTPUT_NAME)
    worst = digits_onnx.max_difference(model, graph, check.x, input_name=INPUT_NAME)
    if worst > ONNX_TOLERANCE:
        raise RuntimeError(
            f"the ONNX graph of digits v{version} differs from Keras by {worst:.2e} "
            f"(more than {ONNX_TOLERANCE:.0e}); it was not written"
        )
    path = out / f"digits-v{version}.onnx"
    path.write_bytes(graph.SerializeToString())
    return path


def sample_rows(frame: DigitsFrame, *, seed: int = 0, raw: bool = False) -> list[dict[str, Any]]:
    """Every image as a `DigitImage` dict (or `DigitImageBytes` when `raw`), shuffled.

    The id keeps the image's index in scikit-learn's order, so a record can be traced back.
    """
    order = np.random.default_rng(seed).permutation(len(frame.y))
    rows = []
    for index in order:
        image = frame.x[index]
        pixels: Any = (
            base64.b64encode(image.astype("<f4").tobytes()).decode("ascii")
            if raw
            else image.tolist()
        )
        rows.append(
            {"id": f"digit-{int(index):04d}", "pixels": pixels, "label": int(frame.y[index])}
        )
    return rows


def write_samples(path: Path, *, raw: bool = False) -> Path:
    """Write `sample_rows()` as JSON lines, the input of the digits examples."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sample_rows(load_digits_frame(), raw=raw)
    path.write_text("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the artifacts")
    parser.add_argument("--version", choices=["1", "2", "all"], default="all")
    parser.add_argument("--epochs", type=int, default=None, help="override each version's")
    args = parser.parse_args(argv)
    versions = list(VERSIONS) if args.version == "all" else [int(args.version)]
    frame = load_digits_frame()
    _, test = split(frame)
    for version in versions:
        started = time.perf_counter()
        model = train_model(version, args.epochs)
        keras_file, saved_model = export(model, out=args.out, version=version)
        written = [str(keras_file), f"{saved_model}/"]
        if version == 1:
            written.append(str(export_onnx(model, out=args.out, version=version, check=frame)))
        print(
            f"digits v{version}: test accuracy {accuracy(model, test):.3f} "
            f"({len(test.y)} images), {time.perf_counter() - started:.1f} s -> {', '.join(written)}"
        )
    print(f"samples -> {write_samples(args.out / 'digits-sample.jsonl')}")
    print(f"samples -> {write_samples(args.out / 'digits-sample-bytes.jsonl', raw=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
