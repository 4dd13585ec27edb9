"""Planning an explanation, without a model: which inputs, which output, which method, and why."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streamflow.models import tensors
from streamflow.models.predictor import Gradients
from streamflow.streamlets.explain import scope


class _Model:
    """An embedded model as planning sees it: can it be differentiated, and how."""

    remote = False

    def __init__(self, *, differentiable: bool = True, description: str = "onnx:m") -> None:
        self.description = description
        self.gradients = Gradients(self.call_named) if differentiable else None

    def call_named(self, inputs: Any) -> Any:
        raise AssertionError("planning never runs the model")


def _layout(**inputs: Any) -> scope.Layout:
    return scope.Layout.of(tensors.parse_inputs(inputs))


def _plan(layout: scope.Layout, *, method: str = "integrated-gradients", **kw: Any) -> scope.Plan:
    settings: dict[str, Any] = {
        "tag": "m:1",
        "fallback": "shap-kernel",
        "predictor": _Model(),
        "output": "",
        "baseline": "auto",
        "explicit_baseline": False,
        "probe": lambda: "",
        **kw,
    }
    return scope.plan(method, layout=layout, **settings)


IMAGE = {"field": "pixels", "shape": [2, 2, 1]}
TEXT = {"field": "review", "dtype": "string"}


def test_a_layout_lays_float_inputs_side_by_side_and_names_their_elements() -> None:
    layout = _layout(image=IMAGE, review=TEXT, features={"fields": ["a", "b", "c"]})
    assert layout.explained == ("image", "features")
    assert layout.skipped == {"review": "input 'review' (string: text)"}
    assert layout.features == 7 and layout.fixed_shape and not layout.tabular
    batch = {
        "image": np.arange(8, dtype=np.float32).reshape(2, 2, 2, 1),
        "features": np.arange(6, dtype=np.float32).reshape(2, 3) + 100,
    }
    rows = layout.flatten(batch)
    np.testing.assert_array_equal(rows[0], [0, 1, 2, 3, 100, 101, 102])
    back = layout.split(rows)
    for name, array in batch.items():
        np.testing.assert_array_equal(back[name], array)
    assert layout.split(rows[1])["image"].shape == (2, 2, 1)
    assert layout.feature_names("image", (2, 2, 1)) == [
        "image[0,0,0]",
        "image[0,1,0]",
        "image[1,0,0]",
        "image[1,1,0]",
    ]
    assert layout.feature_names("features", (3,)) == ["a", "b", "c"]
    ragged = _layout(tokens={"field": "t", "shape": [-1, 4]})
    assert not ragged.fixed_shape and ragged.features == 0


def test_integrated_gradients_start_from_the_mean_of_vectors_and_from_zeros_for_images() -> None:
    assert _plan(_layout(x={"field": "x", "shape": [13]})).baseline == "mean"
    assert _plan(_layout(image=IMAGE)).baseline == "zeros"
    assert _plan(_layout(image=IMAGE), baseline="median").baseline == "median"
    ragged = _plan(_layout(tokens={"field": "t", "shape": [-1, 4]}), baseline="mean")
    assert ragged.baseline == "zeros" and "baseline mean needs inputs of fixed shape" in ragged.note
    assert _plan(_layout(image=IMAGE), explicit_baseline=True).baseline == "values"


def test_a_model_without_gradients_falls_back_to_kernel_only_where_kernel_applies() -> None:
    onnx = _Model(differentiable=False)
    flat = _plan(_layout(image=IMAGE), predictor=onnx)
    assert flat.method == "shap-kernel"
    assert "onnx:m model exposes no gradients); using shap-kernel" in flat.note
    mixed = _plan(_layout(image=IMAGE, review=TEXT), predictor=onnx)
    assert mixed.method == "none" and "shap-kernel does not apply" in mixed.note
    with pytest.raises(scope.ExplainError, match="integrated-gradients cannot explain m:1"):
        _plan(_layout(image=IMAGE), predictor=onnx, fallback="none")
    probed = _plan(_layout(image=IMAGE), probe=lambda: "its output has no gradient")
    assert probed.method == "shap-kernel" and "its output has no gradient" in probed.note


def test_text_inputs_are_named_in_the_plan_and_held_fixed() -> None:
    only_text = _plan(_layout(review=TEXT))
    assert only_text.method == "none"
    assert "does not apply to this model: it takes input 'review' (string: text)" in only_text.note
    mixed = _plan(_layout(review=TEXT, x={"field": "x", "shape": [3]}), baseline="zeros")
    assert mixed.method == "integrated-gradients" and mixed.explained == ("x",)
    assert mixed.fixed == ("review",) and "held at each record's value" in mixed.note


def _bound(outputs: list[str], mapped: tuple[str, ...] = ()) -> tensors.BoundMapping:
    signature = tensors.ModelSignature(
        inputs={}, outputs={n: tensors.TensorSpec(n, "float32", (-1, 3)) for n in outputs}
    )
    return tensors.BoundMapping(
        inputs={}, outputs=[(n, tensors.TensorOutput(n, n)) for n in mapped], signature=signature
    )


def test_the_explained_output_is_the_only_one_the_named_one_or_the_first_mapped() -> None:
    assert scope.explained_output(_bound(["probabilities"]), "") == "probabilities"
    assert scope.explained_output(_bound(["a", "b"]), "b") == "b"
    assert scope.explained_output(_bound(["a", "b"], ("b",)), "") == "b"
    with pytest.raises(scope.ExplainError, match="set explained_output"):
        scope.explained_output(_bound(["a", "b"]), "")
    with pytest.raises(scope.ExplainError, match="'c' is not an output of the model"):
        scope.explained_output(_bound(["a", "b"]), "c")
