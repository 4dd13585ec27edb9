"""Small models with named, typed inputs and outputs, built (not trained) with fixed seeds.

Correctness is checked against the model itself, so untrained weights are enough:
what matters is that the right tensors reach the right inputs, and the right
outputs reach the right fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

WORDS = ["good", "great", "fine", "bad", "awful", "poor", "the", "tea", "was", "is"]


def mixed_keras(path: Path) -> Any:
    """features float32[4] + region int64 -> probabilities[3] (softmax), score[1] (sigmoid)."""
    import keras

    keras.utils.set_random_seed(7)
    features = keras.Input(shape=(4,), name="features")
    region = keras.Input(shape=(), dtype="int64", name="region")
    embedded = keras.layers.Embedding(5, 3)(region)
    hidden = keras.layers.Dense(8, activation="relu")(
        keras.layers.Concatenate()([features, embedded])
    )
    probabilities = keras.layers.Dense(3, activation="softmax", name="probabilities")(hidden)
    score = keras.layers.Dense(1, activation="sigmoid", name="score")(hidden)
    model = keras.Model(
        inputs={"features": features, "region": region},
        outputs={"probabilities": probabilities, "score": score},
        name="mixed",
    )
    model.save(path)
    return model


def text_keras(path: Path) -> Any:
    """A raw string in (TextVectorization inside the model) -> sentiment[2]."""
    import keras

    keras.utils.set_random_seed(11)
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=5)
    vectorize.adapt(np.array([" ".join(WORDS[i : i + 4]) for i in range(len(WORDS))]))
    text = keras.Input(shape=(), dtype="string", name="text")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(20, 4)(vectorize(text)))
    sentiment = keras.layers.Dense(2, activation="softmax", name="sentiment")(pooled)
    model = keras.Model(inputs=text, outputs=sentiment, name="text")
    model.save(path)
    return model


def mixed_onnx(path: Path, *, domain: str = "", external: bool = False) -> dict[str, np.ndarray]:
    """The same interface in ONNX: softmax(features @ W + E[region]), sigmoid(sum of logits).

    ``domain`` puts the Softmax in another operator domain; ``external`` stores W in a
    file beside the model. Both must be refused. Returns the weights, to predict with.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    e = rng.normal(size=(5, 3)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["features", "W"], ["xw"]),
        helper.make_node("Gather", ["E", "region"], ["er"], axis=0),
        helper.make_node("Add", ["xw", "er"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1, domain=domain),
        helper.make_node("ReduceSum", ["logits", "axes"], ["total"], keepdims=1),
        helper.make_node("Sigmoid", ["total"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("region", TensorProto.INT64, ["n"]),
        ],
        [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n", 1]),
        ],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(e, "E"),
            numpy_helper.from_array(np.array([1], np.int64), "axes"),
        ],
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    if external:
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="weights.bin",
            size_threshold=0,
        )
    else:
        onnx.save_model(model, str(path))
    return {"W": w, "E": e}


def mixed_onnx_predict(weights: dict[str, np.ndarray], x: np.ndarray, region: np.ndarray) -> Any:
    logits = x @ weights["W"] + weights["E"][region]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = exp / exp.sum(axis=1, keepdims=True)
    score = 1.0 / (1.0 + np.exp(-logits.sum(axis=1, keepdims=True)))
    return probabilities, score


def renamed_keras(path: Path) -> Any:
    """Dict inputs and outputs whose keys are not the layers' names (both must work)."""
    import keras

    keras.utils.set_random_seed(13)
    features = keras.Input(shape=(4,), name="features_layer")
    scale = keras.Input(shape=(1,), name="scale_layer")
    hidden = keras.layers.Dense(3, name="dense_a")(features) * scale
    model = keras.Model(
        inputs={"x": features, "s": scale},
        outputs={"scores": keras.layers.Softmax(name="dense_b")(hidden), "raw": hidden},
    )
    model.save(path)
    return model


def sparse_external_onnx(path: Path) -> None:
    """A model whose sparse initializer keeps its values in a file beside it."""
    import onnx
    from onnx import TensorProto, helper

    mixed_onnx(path)
    model = onnx.load(str(path))
    values = helper.make_tensor("S_values", TensorProto.FLOAT, [1], [0.0])
    values.ClearField("float_data")
    values.data_location = TensorProto.EXTERNAL
    values.external_data.add(key="location", value="secret.bin")
    indices = helper.make_tensor("S_indices", TensorProto.INT64, [1], [0])
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [3]))
    path.write_bytes(model.SerializeToString())
