"""The shorthand (input_fields, output_field, class_field) on classifiers, and mapping errors.

A classifier converted with skl2onnx has two outputs, a label and probabilities
(a ZipMap of class -> probability by default, a tensor with zipmap=False); the
shorthand finds both by name, checks them against the signature, and reads a
ZipMap as a probabilities row. Every error of fitting a mapping to a model is
phrased once, names the model's tensors with their types, and ends with the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from streamflow.models import onnx_model
from streamflow.models import tensors as t
from tests.streamlets.serving.sklearn_models import FEATURES, WineSklearn, wine_sklearn

__all__ = ["wine_sklearn"]

SHORTHAND = {"input_fields": FEATURES, "output_field": "probabilities", "class_field": "predicted"}
SCALARS = frozenset({"predicted"})


def spec(name: str, dtype: str, shape: tuple[int, ...] | None, kind: str = "") -> t.TensorSpec:
    if not kind:
        return t.TensorSpec(name, dtype, shape)
    return t.TensorSpec(name, dtype, shape, kind)


def signature(*outputs: t.TensorSpec, inputs: tuple[t.TensorSpec, ...] = ()) -> t.ModelSignature:
    ins = inputs or (spec("X", "float32", (-1, len(FEATURES))),)
    return t.ModelSignature({s.name: s for s in ins}, {s.name: s for s in outputs})


def zipmap_classifier() -> t.ModelSignature:
    """skl2onnx's default: a label, and a ZipMap of class -> probability."""
    return signature(
        spec("output_label", "int64", (-1,)),
        spec("output_probability", "float32", (-1, -1), "zipmap"),
    )


def tensor_classifier() -> t.ModelSignature:
    """skl2onnx with zipmap=False: a label and a probabilities tensor."""
    return signature(spec("label", "int64", (-1,)), spec("probabilities", "float32", (-1, 3)))


def bind(sig: t.ModelSignature, **config: Any) -> t.BoundMapping:
    return t.TensorMapping.from_config(**{**SHORTHAND, **config}).bind(sig)


@pytest.mark.parametrize(
    ("sig", "scores", "label"),
    [
        (zipmap_classifier, "output_probability", "output_label"),
        (tensor_classifier, "probabilities", "label"),
    ],
    ids=["skl2onnx-default", "skl2onnx-zipmap-false"],
)
def test_the_shorthand_reads_a_classifiers_probabilities_and_label(
    sig: Callable[[], t.ModelSignature], scores: str, label: str
) -> None:
    bound = bind(sig())
    assert [(name, out.field, out.transform) for name, out in bound.outputs] == [
        (scores, "probabilities", "raw"),
        (label, "predicted", "raw"),  # the model's label, not an argmax of the scores
    ]


def test_without_a_label_output_the_class_is_the_argmax_of_the_probabilities() -> None:
    bound = bind(
        signature(spec("probabilities", "float32", (-1, 3)), spec("logits", "float32", (-1, 3)))
    )
    assert [(name, out.transform) for name, out in bound.outputs] == [
        ("probabilities", "raw"),
        ("probabilities", "argmax"),
    ]


def test_a_model_with_one_output_maps_as_before() -> None:
    bound = bind(signature(spec("dense_2", "float32", (-1, 3))))
    assert [(name, out.transform) for name, out in bound.outputs] == [
        ("dense_2", "raw"),
        ("dense_2", "argmax"),
    ]


def mapping_error(sig: t.ModelSignature, **config: Any) -> str:
    with pytest.raises(t.MappingError) as caught:
        bind(sig, **config)
    message = str(caught.value)
    assert_well_phrased(message, sig)
    return message


def assert_well_phrased(message: str, sig: t.ModelSignature) -> None:
    """Each sentence once; every model tensor named with its type; the fix last."""
    sentences = [s.strip() for s in re.split(r"[.;](?:\s|$)", message) if s.strip()]
    repeated = {s for s in sentences if sentences.count(s) > 1}
    assert not repeated, f"repeated in: {message}"
    for tensor in (*sig.inputs.values(), *sig.outputs.values()):
        assert described(tensor) in message, message
    assert "Fix: " in message and message.index("Fix: ") > message.index("the model has inputs:")


def described(tensor: t.TensorSpec) -> str:
    """How a message names a model's tensor: its name and type."""
    kind = getattr(tensor, "kind", "tensor")
    if kind == "zipmap":
        return f"{tensor.name} {{class: probability}} per record (a ZipMap)"
    if kind != "tensor":
        return f"{tensor.name} {kind} (not a tensor)"
    return f"{tensor.name} {tensor.dtype}{list(tensor.shape or [])}"


def failures() -> dict[str, Callable[[], tuple[t.ModelSignature, dict[str, Any], str]]]:
    """Each way a mapping can fail to fit a model: (signature, config, what the message says),
    each made when its test runs."""
    return {
        "two unnamed outputs": lambda: (
            signature(spec("a", "float32", (-1, 3)), spec("b", "int64", (-1,))),
            {},
            "none of them is a probabilities output by name",
        ),
        "two probabilities outputs": lambda: (
            signature(spec("probs", "float32", (-1, 3)), spec("scores", "float32", (-1, 3))),
            {},
            "probs, scores are all probabilities outputs by name",
        ),
        "probabilities that are not floats": lambda: (
            signature(spec("probabilities", "int64", (-1,)), spec("label", "int64", (-1,))),
            {},
            "not a row of floats per record",
        ),
        "a label that is a row": lambda: (
            signature(spec("probabilities", "float32", (-1, 3)), spec("label", "float32", (-1, 3))),
            {},
            "not one integer or string per record",
        ),
        "an output that is not a tensor": lambda: (
            signature(spec("probabilities", "", None, "seq(tensor(float))")),
            {},
            "is a seq(tensor(float)), which is not a tensor",
        ),
        "input_fields into two inputs": lambda: (
            signature(
                spec("probabilities", "float32", (-1, 3)),
                inputs=(spec("x", "float32", (-1, 2)), spec("y", "float32", (-1, 2))),
            ),
            {},
            "the model has 2 inputs (x, y)",
        ),
        "too few input_fields": lambda: (
            signature(spec("probabilities", "float32", (-1, 3))),
            {"input_fields": FEATURES[:12]},
            "list 13 fields in input_fields (it lists 12)",
        ),
        "a misnamed input": lambda: (
            signature(
                spec("probabilities", "float32", (-1, 3)), inputs=(spec("x", "float32", (-1, 13)),)
            ),
            {"input_fields": [], "inputs": {"features": {"fields": FEATURES}}},
            "rename 'features' to one of the model's inputs (x)",
        ),
        "a misnamed output": lambda: (
            tensor_classifier(),
            {
                "output_field": "",
                "class_field": "",
                "outputs": {"probs": {"field": "probabilities"}},
            },
            "the model has no output 'probs'",
        ),
        "a dtype that differs": lambda: (
            signature(
                spec("probabilities", "float32", (-1, 3)), inputs=(spec("x", "float64", (-1, 13)),)
            ),
            {"input_fields": [], "inputs": {"x": {"fields": FEATURES}}},
            "set dtype: float64 on input 'x'",
        ),
        "a ragged input into a fixed length": lambda: (
            signature(
                spec("probabilities", "float32", (-1, 3)), inputs=(spec("ids", "int64", (-1, 16)),)
            ),
            {
                "input_fields": [],
                "inputs": {"ids": {"field": "ids", "dtype": "int64", "shape": [-1]}},
            },
            "set max_len: 16 on input 'ids'",
        ),
        "an input the mapping does not feed": lambda: (
            signature(
                spec("probabilities", "float32", (-1, 3)),
                inputs=(spec("x", "float32", (-1, 13)), spec("region", "int64", (-1,))),
            ),
            {"input_fields": [], "inputs": {"x": {"fields": FEATURES}}},
            "add region under inputs:",
        ),
    }


CASES = [
    "two unnamed outputs",
    "two probabilities outputs",
    "probabilities that are not floats",
    "a label that is a row",
    "an output that is not a tensor",
    "input_fields into two inputs",
    "too few input_fields",
    "a misnamed input",
    "a misnamed output",
    "a dtype that differs",
    "a ragged input into a fixed length",
    "an input the mapping does not feed",
]


def test_the_cases_are_every_failure() -> None:
    assert list(failures()) == CASES


@pytest.mark.parametrize("case", CASES)
def test_every_mapping_error_says_each_thing_once_and_ends_with_the_fix(case: str) -> None:
    sig, config, expected = failures()[case]()
    assert expected in mapping_error(sig, **config)


def test_both_shorthand_outputs_failing_for_one_reason_say_it_once() -> None:
    message = mapping_error(failures()["two unnamed outputs"]()[0])
    assert message.count("output_field and class_field read") == 1
    assert "outputs: {a: {field: FIELD}, b: {field: FIELD}}" in message  # the model's own names


# -- real skl2onnx models, through the ONNX loader ------------------------------------------


@pytest.mark.parametrize("model", ["logistic", "forest"])
@pytest.mark.parametrize("form", ["zipmap", "tensors"])
def test_skl2onnx_classifiers_serve_scikit_learns_classes_and_probabilities(
    wine_sklearn: WineSklearn, model: str, form: str
) -> None:
    fitted = wine_sklearn.models[model]
    loaded = onnx_model.load(getattr(fitted, form), parameters={})
    bound = bind(loaded.signature)
    records = [dict(zip(FEATURES, map(float, row), strict=True)) for row in wine_sklearn.x]
    decoded = bound.decode(loaded.run(bound.encode(records)), len(records), scalar_fields=SCALARS)
    predicted = np.array([d["predicted"] for d in decoded])
    np.testing.assert_array_equal(predicted, fitted.estimator.predict(wine_sklearn.x))
    probabilities = np.array([d["probabilities"] for d in decoded])
    np.testing.assert_allclose(
        probabilities, fitted.estimator.predict_proba(wine_sklearn.x), atol=1e-5
    )


def test_a_zipmap_output_is_described_as_one(wine_sklearn: WineSklearn) -> None:
    loaded = onnx_model.load(wine_sklearn.models["logistic"].zipmap, parameters={})
    assert loaded.signature.describe() == (
        "inputs: X float32[-1, 13]; outputs: output_label int64[-1], "
        "output_probability {class: probability} per record (a ZipMap)"
    )


def test_a_model_whose_output_is_no_tensor_is_refused_with_the_fix(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["X"], ["probabilities"])],
        "sequence",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 13])],
        [helper.make_tensor_sequence_value_info("probabilities", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "sequence.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    loaded = onnx_model.load(path, parameters={})
    message = mapping_error(loaded.signature)
    assert "output 'probabilities' is a seq(tensor(float)), which is not a tensor" in message
    assert message.endswith("options={'zipmap': False} for a classifier's probabilities)")
