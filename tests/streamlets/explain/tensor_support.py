"""Models with named tensor inputs for the explainer: an image CNN, image + vector, text.

Built with fixed seeds and not trained: completeness and shapes are checked
against the model itself, so any weights do. Activations are smooth (tanh,
softmax), so a modest number of path steps integrates them closely.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from streamflow import Inlet
from streamflow.streamlets.explain import ModelExplainer
from streamflow.testkit import StreamletHarness
from tests.streamlets.explain import explain_support as e

SCHEMAS = Path(__file__).parent / "schemas"
WORDS = ["good", "great", "fine", "bad", "awful", "poor", "the", "tea", "was", "is"]
IMAGE = {"field": "pixels", "dtype": "float32", "shape": [8, 8, 1]}
VECTOR = {"field": "features", "dtype": "float32", "shape": [13]}
TEXT = {"field": "review", "dtype": "string"}
REGION = {"field": "region", "dtype": "int64"}
EVENTS = {"field": "events", "dtype": "float32", "shape": [-1, 4]}


class SampleExplainer(ModelExplainer):
    inp = Inlet("in", "tests.explain.Sample")


def _keras() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    return keras


def _image_branch(keras: Any, image: Any) -> Any:
    conv = keras.layers.Conv2D(4, 3, activation="tanh")(image)
    return keras.layers.Flatten()(conv)


def cnn(path: Path) -> Any:
    """image float32[8, 8, 1] -> probabilities[10] (softmax)."""
    keras = _keras()
    keras.utils.set_random_seed(1)
    image = keras.Input(shape=(8, 8, 1), name="image")
    out = keras.layers.Dense(10, activation="softmax", name="probabilities")(
        _image_branch(keras, image)
    )
    model = keras.Model(image, out, name="digits")
    model.save(path)
    return model


def image_and_vector(path: Path) -> Any:
    """image float32[8, 8, 1] + features float32[13] -> probabilities[3]."""
    keras = _keras()
    keras.utils.set_random_seed(2)
    image = keras.Input(shape=(8, 8, 1), name="image")
    features = keras.Input(shape=(13,), name="features")
    joined = keras.layers.Concatenate()([_image_branch(keras, image), features])
    hidden = keras.layers.Dense(8, activation="tanh")(joined)
    out = keras.layers.Dense(3, activation="softmax", name="probabilities")(hidden)
    model = keras.Model({"image": image, "features": features}, out, name="two")
    model.save(path)
    return model


def _text_branch(keras: Any, text: Any) -> Any:
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=5)
    vectorize.adapt(np.array([" ".join(WORDS[i : i + 4]) for i in range(len(WORDS))]))
    embedded = keras.layers.Embedding(20, 4)(vectorize(text))
    return keras.layers.GlobalAveragePooling1D()(embedded)


def text_only(path: Path) -> Any:
    """review string -> sentiment[2]: nothing an attribution method applies to."""
    keras = _keras()
    keras.utils.set_random_seed(3)
    text = keras.Input(shape=(), dtype="string", name="review")
    out = keras.layers.Dense(2, activation="softmax", name="sentiment")(_text_branch(keras, text))
    model = keras.Model(text, out, name="text")
    model.save(path)
    return model


def text_and_vector(path: Path) -> Any:
    """review string + features float32[13] -> probabilities[3]."""
    keras = _keras()
    keras.utils.set_random_seed(4)
    text = keras.Input(shape=(), dtype="string", name="review")
    features = keras.Input(shape=(13,), name="features")
    joined = keras.layers.Concatenate()([_text_branch(keras, text), features])
    hidden = keras.layers.Dense(8, activation="tanh")(joined)
    out = keras.layers.Dense(3, activation="softmax", name="probabilities")(hidden)
    model = keras.Model({"review": text, "features": features}, out, name="mixed")
    model.save(path)
    return model


def vector_and_id(path: Path) -> Any:
    """features float32[13] + region int64 -> probabilities[3] and score[1]: two outputs."""
    keras = _keras()
    keras.utils.set_random_seed(5)
    features = keras.Input(shape=(13,), name="features")
    region = keras.Input(shape=(), dtype="int64", name="region")
    embedded = keras.layers.Embedding(5, 3)(region)
    hidden = keras.layers.Dense(8, activation="tanh")(
        keras.layers.Concatenate()([features, embedded])
    )
    probabilities = keras.layers.Dense(3, activation="softmax", name="probabilities")(hidden)
    score = keras.layers.Dense(1, activation="sigmoid", name="score")(hidden)
    model = keras.Model(
        {"features": features, "region": region},
        {"probabilities": probabilities, "score": score},
        name="scored",
    )
    model.save(path)
    return model


def sequence(path: Path) -> Any:
    """events float32[-1, 4] (ragged, padded with zeros) -> probabilities[3]."""
    keras = _keras()
    keras.utils.set_random_seed(6)
    events = keras.Input(shape=(None, 4), name="events")
    hidden = keras.layers.Dense(6, activation="tanh")(events)
    pooled = keras.layers.GlobalAveragePooling1D()(hidden)
    out = keras.layers.Dense(3, activation="softmax", name="probabilities")(pooled)
    model = keras.Model(events, out, name="sequence")
    model.save(path)
    return model


def samples(n: int, *, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "id": f"s{i}",
            "pixels": rng.uniform(0, 1, size=(8, 8, 1)).round(4).tolist(),
            "features": rng.normal(size=13).round(4).tolist(),
            "review": " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), size=4)),
            "region": i % 5,
            "events": rng.normal(size=(1 + i % 4, 4)).round(4).tolist(),
        }
        for i in range(n)
    ]


def harness(tmp_path: Path, **config: Any) -> StreamletHarness:
    defaults = {"cache_dir": str(tmp_path / "cache"), "sample_rate": 1.0, "background_size": 10}
    return StreamletHarness(
        SampleExplainer, config={**defaults, **config}, schema_paths=[SCHEMAS], name="explain"
    )


def serving(tmp_path: Path, model: Path, **config: Any) -> tuple[StreamletHarness, dict[str, Any]]:
    """A harness with ``model`` loaded; and its final status record."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    h = harness(tmp_path, **config)
    h.control("model", e.descriptor(1, model))
    return h, e.settle(h, 1)


def by_record(explanations: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """Explanations grouped by the explained record's offset, then by input."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for explanation in explanations:
        out.setdefault(explanation["offset"], {})[explanation["input"]] = explanation
    return out
