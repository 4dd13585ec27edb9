"""Train the review-sentiment model that the text example serves.

Why this model: the example is about a model that takes raw text. Its input
is a string tensor named `review`, one string per record, and the
`TextVectorization` layer inside the model turns it into tokens, so the
vocabulary travels with every artifact and no tokenizer lives between the
stream and the model. It trains in seconds on a corpus that `corpus.py`
generates from a seed, so nothing is downloaded.

Written for version 1 (two versions would show nothing the digits and wine
examples do not): a Keras 3 `.keras` file, checked to load with
`safe_mode=True` and to classify a batch of raw strings, and a SavedModel whose
`serving_default` takes `review` (string, [batch]) and returns `sentiment`
(float32, [batch, 2]: the probability of negative, then positive).

    python blueprints/reviews/train.py --out DIR [--epochs N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up banner quiet

import corpus
import keras
import numpy as np

__all__ = [
    "INPUT_NAME",
    "LABELS",
    "OUTPUT_NAME",
    "ReviewsFrame",
    "accuracy",
    "check_artifact",
    "export",
    "load_reviews_frame",
    "main",
    "sample_rows",
    "train_model",
    "write_samples",
]

LABELS = corpus.LABELS
INPUT_NAME = "review"
OUTPUT_NAME = "sentiment"
VOCABULARY = 400
SEQUENCE = 24  # tokens per review; the longest generated one has fewer
_SEED = 1
_TEST_EVERY = 4  # every 4th review is held out


class ReviewsFrame(NamedTuple):
    """Reviews as arrays: `x` object [n] of str, `y` int64 [n] (an index into LABELS)."""

    x: np.ndarray
    y: np.ndarray


def load_reviews_frame() -> ReviewsFrame:
    """The generated corpus (3,000 reviews, half of each label)."""
    reviews = corpus.generate()
    # dtype=object: Keras takes strings as objects; a NumPy unicode array is not a tensor dtype.
    return ReviewsFrame(
        x=np.array([text for text, _ in reviews], dtype=object),
        y=np.array([label for _, label in reviews], dtype=np.int64),
    )


def split(frame: ReviewsFrame) -> tuple[ReviewsFrame, ReviewsFrame]:
    is_test = np.arange(len(frame.y)) % _TEST_EVERY == 0
    return (
        ReviewsFrame(frame.x[~is_test], frame.y[~is_test]),
        ReviewsFrame(frame.x[is_test], frame.y[is_test]),
    )


def train_model(epochs: int = 6) -> keras.Model:
    """Raw review text in, the probability of each label out."""
    keras.utils.set_random_seed(_SEED)
    train, _ = split(load_reviews_frame())
    vectorise = keras.layers.TextVectorization(
        max_tokens=VOCABULARY, output_sequence_length=SEQUENCE, name="vectorise"
    )
    vectorise.adapt(train.x)
    inputs = keras.Input(shape=(), dtype="string", name=INPUT_NAME)
    hidden = vectorise(inputs)
    hidden = keras.layers.Embedding(VOCABULARY, 16, name="embed")(hidden)
    hidden = keras.layers.GlobalAveragePooling1D(name="average")(hidden)
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(hidden)
    outputs = keras.layers.Dense(len(LABELS), activation="softmax", name=OUTPUT_NAME)(hidden)
    model = keras.Model(inputs, outputs, name="reviews_v1")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(train.x, train.y, epochs=epochs, batch_size=32, shuffle=True, verbose=0)
    return model


def accuracy(model: keras.Model, frame: ReviewsFrame) -> float:
    predicted = np.argmax(model.predict(frame.x, verbose=0), axis=1)
    return float(np.mean(predicted == frame.y))


def export(model: keras.Model, *, out: Path, version: int = 1) -> tuple[Path, Path]:
    """Write `reviews-v{N}.keras` and the SavedModel dir `reviews-v{N}/`; return both paths."""
    import tensorflow as tf

    out.mkdir(parents=True, exist_ok=True)
    keras_file = out / f"reviews-v{version}.keras"
    saved_model = out / f"reviews-v{version}"
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda review: {OUTPUT_NAME: model(review, training=False)},
        input_signature=[tf.TensorSpec((None,), tf.string, name=INPUT_NAME)],
    )
    with warnings.catch_warnings():
        # Keras 3.15 saves variables through np.array(), which NumPy 2 flags as deprecated.
        warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
        model.save(keras_file)
        archive.write_out(str(saved_model), verbose=False)
    return keras_file, saved_model


def check_artifact(keras_file: Path, model: keras.Model) -> None:
    """The saved file loads without pickled code and classifies raw strings as `model` does."""
    loaded = keras.models.load_model(keras_file, safe_mode=True, compile=False)
    batch = np.array(["The kettle works perfectly. Five stars.", "It broke. One star."], object)
    ours, theirs = model.predict(batch, verbose=0), loaded.predict(batch, verbose=0)
    if theirs.shape != (2, len(LABELS)) or not np.allclose(ours, theirs, atol=1e-6):
        raise RuntimeError(f"{keras_file} does not predict as the trained model does")


def sample_rows(frame: ReviewsFrame) -> list[dict[str, Any]]:
    """Every review as a `Review` dict, in the corpus's (already shuffled) order."""
    return [
        {"id": f"review-{index:04d}", "review": str(text), "label": int(label)}
        for index, (text, label) in enumerate(zip(frame.x, frame.y, strict=True))
    ]


def write_samples(path: Path) -> Path:
    """Write `sample_rows()` as JSON lines, the input of the reviews example."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sample_rows(load_reviews_frame())
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the artifacts")
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    model = train_model(args.epochs)
    keras_file, saved_model = export(model, out=args.out)
    check_artifact(keras_file, model)
    _, test = split(load_reviews_frame())
    print(
        f"reviews v1: test accuracy {accuracy(model, test):.3f} ({len(test.y)} reviews), "
        f"{time.perf_counter() - started:.1f} s -> {keras_file}, {saved_model}/"
    )
    print(f"samples -> {write_samples(args.out / 'reviews-sample.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
