"""The tensor mapping on its own: config, encoding each input kind, transforms, binding, schemas."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from streamflow.models import tensors as t

IMAGE = {"image": {"field": "pixels", "dtype": "float32", "shape": [2, 2, 1]}}


def _bound(inputs: Any, outputs: Any = None, signature: Any = None) -> t.BoundMapping:
    return t.TensorMapping.from_config(inputs=inputs, outputs=outputs).bind(signature)


# -- config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"x": {"dtype": "float32"}}, "name the record field"),
        ({"x": {"field": "a", "dtype": "float16"}}, "dtype 'float16' is not one of"),
        ({"x": {"field": "a", "shape": [8, -1]}}, "only the first dimension may be ragged"),
        ({"x": {"field": "a", "shape": "8x8"}}, "shape must be a list of integers"),
        ({"x": {"field": "a", "shape": [0]}}, "dimensions are positive"),
        ({"x": {"field": "a", "max_len": 5}}, "max_len applies to a ragged shape"),
        ({"x": {"field": "a", "colour": 1}}, "unknown key(s) colour"),
        ({"x": {"fields": ["a", "b"], "dtype": "string"}}, "stacked fields make a numeric"),
    ],
)
def test_bad_input_config_is_explained(inputs: Any, message: str) -> None:
    with pytest.raises(t.MappingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        t.parse_inputs(inputs)


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({"y": {"field": "a", "transform": "softmax"}}, "transform 'softmax' is not one of"),
        ({"y": {"field": "a", "transform": "top_k", "k": 0}}, "k must be a positive"),
        ({"y": {"field": "a", "labels": "cat,dog"}}, "labels must be a list of strings"),
        ({"y": [{"field": "a"}, {"field": "a", "transform": "argmax"}]}, "more than one output"),
        ({"y": []}, "an empty list writes nothing"),
    ],
)
def test_bad_output_config_is_explained(outputs: Any, message: str) -> None:
    with pytest.raises(t.MappingError, match=message):
        t.parse_outputs(outputs)


def test_input_fields_is_shorthand_for_one_stacked_float_input() -> None:
    mapping = t.TensorMapping.from_config(
        input_fields=["a", "b"], output_field="probs", class_field="cls"
    )
    (spec,) = mapping.inputs.values()
    assert spec.name == t.ONLY and spec.stacked and spec.shape == (2,)
    assert {o.field: o.transform for o in mapping.outputs.values()} == {
        "probs": "raw",
        "cls": "argmax",
    }
    with pytest.raises(t.MappingError, match="not both"):
        t.TensorMapping.from_config(inputs=IMAGE, input_fields=["a"])


# -- encoding ---------------------------------------------------------------------------


def test_each_input_kind_becomes_one_batch_tensor() -> None:
    bound = _bound(
        {
            "image": {"field": "pixels", "dtype": "float32", "shape": [2, 2, 1]},
            "raw": {"field": "blob", "dtype": "float32", "shape": [2]},
            "text": {"field": "review", "dtype": "string"},
            "tokens": {"field": "ids", "dtype": "int64", "shape": [-1], "pad": 0, "max_len": 3},
            "stacked": {"fields": ["a", "b"], "dtype": "float64"},
            "flag": {"field": "ok", "dtype": "bool"},
        }
    )
    values = [
        {
            "pixels": [[[0.0], [1.0]], [[2.0], [3.0]]],
            "blob": struct.pack("<2f", 1.5, -2.0),
            "review": "good",
            "ids": [5, 6, 7, 8],
            "a": 1,
            "b": 2.5,
            "ok": True,
        },
        {
            "pixels": [[[4.0], [5.0]], [[6.0], [7.0]]],
            "blob": struct.pack("<2f", 0.0, 9.0),
            "review": "bad",
            "ids": [9],
            "a": 3,
            "b": 4.0,
            "ok": False,
        },
    ]
    arrays = bound.encode(values)
    assert arrays["image"].shape == (2, 2, 2, 1) and arrays["image"].dtype == np.float32
    assert arrays["image"][1, 1, 0, 0] == 6.0
    np.testing.assert_array_equal(arrays["raw"], [[1.5, -2.0], [0.0, 9.0]])
    assert arrays["text"].dtype == object and arrays["text"].tolist() == ["good", "bad"]
    np.testing.assert_array_equal(arrays["tokens"], [[5, 6, 7], [9, 0, 0]])
    assert arrays["tokens"].dtype == np.int64
    np.testing.assert_array_equal(arrays["stacked"], [[1.0, 2.5], [3.0, 4.0]])
    np.testing.assert_array_equal(arrays["flag"], [True, False])


def _objects(*values: Any) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    for index, value in enumerate(values):
        column[index] = value
    return column


def test_columns_become_the_same_tensors_as_records() -> None:
    bound = _bound(
        {
            "image": {"field": "pixels", "dtype": "float32", "shape": [2, 2, 1]},
            "raw": {"field": "blob", "dtype": "float32", "shape": [2]},
            "text": {"field": "review", "dtype": "string"},
            "stacked": {"fields": ["a", "b"], "dtype": "float64"},
        }
    )
    columns = {
        "pixels": np.arange(8, dtype=np.float32).reshape(2, 2, 2, 1),
        "blob": _objects(struct.pack("<2f", 1.5, -2.0), struct.pack("<2f", 0.0, 9.0)),
        "review": _objects("good", "bad"),
        "a": np.array([1, 3], dtype=np.int32),
        "b": np.ma.MaskedArray([2.5, 4.0], mask=[False, False]),
    }
    arrays = bound.encode_columns(columns)
    assert arrays is not None
    records = [
        {
            "pixels": columns["pixels"][i].tolist(),
            "blob": columns["blob"][i],
            "review": columns["review"][i],
            "a": int(columns["a"][i]),
            "b": float(columns["b"][i]),
        }
        for i in range(2)
    ]
    expected = bound.encode(records)
    for name, tensor in expected.items():
        assert arrays[name].dtype == tensor.dtype
        np.testing.assert_array_equal(arrays[name], tensor)


@pytest.mark.parametrize(
    "column",
    [
        np.ma.MaskedArray([1.0, 2.0], mask=[False, True]),  # a null: the records say which
        np.array([[1.0, 2.0], [3.0, 4.0]]),  # not the mapping's shape
        _objects("a", "b"),  # text for a number
    ],
)
def test_columns_that_do_not_fit_go_through_the_records(column: Any) -> None:
    bound = _bound({"x": {"field": "x", "dtype": "float32"}})
    assert bound.encode_columns({"x": column}) is None


def test_ragged_without_max_len_pads_to_the_longest_in_the_batch() -> None:
    bound = _bound({"ids": {"field": "ids", "dtype": "int32", "shape": [-1], "pad": -1}})
    arrays = bound.encode([{"ids": [1, 2]}, {"ids": [3, 4, 5, 6]}])
    np.testing.assert_array_equal(arrays["ids"], [[1, 2, -1, -1], [3, 4, 5, 6]])


def test_records_that_do_not_fit_are_named_by_index_with_the_reason() -> None:
    bound = _bound(IMAGE)
    good = {"pixels": [[[0.0], [1.0]], [[2.0], [3.0]]]}
    values = [good, {"pixels": [[0.0, 1.0]]}, good, {"pixels": None}, {"other": 1}, good]
    with pytest.raises(t.RecordErrors) as caught:
        bound.encode(values)
    errors = caught.value.errors
    assert sorted(errors) == [1, 3, 4]
    assert "shape" in errors[1] and "null" in errors[3] and "no field 'pixels'" in errors[4]


def test_a_raw_bytes_tensor_of_the_wrong_size_is_refused() -> None:
    bound = _bound({"x": {"field": "blob", "dtype": "float32", "shape": [2, 2]}})
    with pytest.raises(t.RecordErrors) as caught:
        bound.encode([{"blob": b"\x00" * 15}])
    assert "15 bytes" in caught.value.errors[0] and "16 bytes" in caught.value.errors[0]


def test_fractions_are_not_silently_truncated_to_integers() -> None:
    bound = _bound({"ids": {"field": "ids", "dtype": "int64", "shape": [2]}})
    with pytest.raises(t.RecordErrors, match="fractions"):
        bound.encode([{"ids": [1.5, 2.0]}])


# -- outputs ----------------------------------------------------------------------------


def test_every_transform_writes_its_field() -> None:
    bound = _bound(
        IMAGE,
        {
            "probabilities": [
                {"field": "scores"},
                {"field": "predicted", "transform": "argmax"},
                {"field": "name", "transform": "argmax", "labels": ["cat", "dog", "eel"]},
                {"field": "top", "transform": "top_k", "k": 2, "labels": ["cat", "dog", "eel"]},
                {"field": "many", "transform": "threshold", "threshold": 0.3},
            ],
            "score": {"field": "positive", "transform": "threshold", "threshold": 0.5},
            "embedding": {"field": "vector"},
        },
    )
    outputs = {
        "probabilities": np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]], np.float32),
        "score": np.array([[0.9], [0.2]], np.float32),
        "embedding": np.array([[[1.0, 2.0]], [[3.0, 4.0]]], np.float32),
    }
    first, second = bound.decode(outputs, 2)
    assert first["predicted"] == 1 and second["predicted"] == 0
    assert first["name"] == "dog" and second["name"] == "cat"
    assert [x["label"] for x in first["top"]] == ["dog", "eel"]
    assert first["top"][0]["score"] == pytest.approx(0.7)
    assert first["many"] == [False, True, False] and second["many"] == [True, False, True]
    assert first["positive"] is True and second["positive"] is False
    assert second["vector"] == [[3.0, 4.0]]
    assert first["scores"] == pytest.approx([0.1, 0.7, 0.2])


def test_labels_that_do_not_match_the_output_width_are_an_error() -> None:
    bound = _bound(IMAGE, {"p": {"field": "c", "transform": "argmax", "labels": ["a", "b"]}})
    with pytest.raises(t.MappingError, match="3 values per record but 2 labels"):
        bound.decode({"p": np.zeros((1, 3))}, 1)


# -- binding to a model's signature -------------------------------------------------------


def _signature(**inputs: tuple[str, tuple[int, ...]]) -> t.ModelSignature:
    return t.ModelSignature(
        inputs={n: t.TensorSpec(n, dtype, shape) for n, (dtype, shape) in inputs.items()},
        outputs={"probabilities": t.TensorSpec("probabilities", "float32", (-1, 10))},
    )


def test_binding_accepts_a_model_that_fits() -> None:
    bound = _bound(IMAGE, {"probabilities": "scores"}, _signature(image=("float32", (-1, 2, 2, 1))))
    assert list(bound.inputs) == ["image"] and bound.output_names == ["probabilities"]


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        (_signature(pixels=("float32", (-1, 2, 2, 1))), "the model has no input 'image'"),
        (_signature(image=("float64", (-1, 2, 2, 1))), "is float64 in the model, float32"),
        (_signature(image=("float32", (-1, 8, 8, 1))), "per-record shape [8, 8, 1] in the model"),
        (_signature(image=("float32", (-1, 4))), "per-record shape [4] in the model"),
        (
            _signature(image=("float32", (-1, 2, 2, 1)), region=("int64", (-1,))),
            "also needs input(s) region",
        ),
    ],
)
def test_binding_names_every_mismatch_with_the_models_signature(
    signature: t.ModelSignature, message: str
) -> None:
    with pytest.raises(t.MappingError) as caught:
        _bound(IMAGE, {"probabilities": "scores"}, signature)
    assert message in str(caught.value) and "the model has inputs:" in str(caught.value)


def test_a_ragged_input_into_a_fixed_length_model_needs_max_len() -> None:
    tokens = {"tokens": {"field": "ids", "dtype": "int64", "shape": [-1]}}
    signature = t.ModelSignature(
        inputs={"tokens": t.TensorSpec("tokens", "int64", (-1, 16))},
        outputs={"p": t.TensorSpec("p", "float32", (-1, 2))},
    )
    with pytest.raises(t.MappingError, match="set max_len: 16"):
        _bound(tokens, {"p": "scores"}, signature)
    fixed = {"tokens": {**tokens["tokens"], "max_len": 16}}
    assert list(_bound(fixed, {"p": "scores"}, signature).inputs) == ["tokens"]


def test_the_shorthand_needs_a_model_with_one_input() -> None:
    mapping = t.TensorMapping.from_config(input_fields=["a", "b"], output_field="p")
    signature = _signature(x=("float32", (-1, 2)), y=("float32", (-1, 2)))
    with pytest.raises(t.MappingError, match="the model has 2 inputs"):
        mapping.bind(signature)


# -- against the port schemas -----------------------------------------------------------

IN_SCHEMA = {
    "type": "record",
    "name": "In",
    "fields": [
        {
            "name": "pixels",
            "type": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "array", "items": "float"}},
            },
        },
        {"name": "blob", "type": "bytes"},
        {"name": "review", "type": ["null", "string"]},
        {"name": "count", "type": "long"},
        {"name": "flat", "type": {"type": "array", "items": "double"}},
    ],
}
OUT_SCHEMA = {
    "type": "record",
    "name": "Out",
    "fields": [
        {"name": "scores", "type": {"type": "array", "items": "double"}},
        {"name": "predicted", "type": "int"},
        {"name": "label", "type": "string"},
        {"name": "positive", "type": "boolean"},
        {
            "name": "top",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Top",
                    "fields": [
                        {"name": "label", "type": "string"},
                        {"name": "score", "type": "double"},
                    ],
                },
            },
        },
    ],
}


def _problems(inputs: Any, outputs: Any) -> list[tuple[str, str]]:
    mapping = t.TensorMapping.from_config(inputs=inputs, outputs=outputs)
    found = t.check_schemas(mapping, input_schema=IN_SCHEMA, output_schema=OUT_SCHEMA)
    return [(p.code, p.message) for p in found]


def test_a_mapping_that_fits_the_schemas_has_no_problems() -> None:
    assert (
        _problems(
            {
                "image": {"field": "pixels", "dtype": "float32", "shape": [8, 8, 1]},
                "raw": {"field": "blob", "dtype": "float32", "shape": [8, 8, 1]},
                "text": {"field": "review", "dtype": "string"},
                "n": {"field": "count", "dtype": "int64"},
                "seq": {"field": "flat", "dtype": "float32", "shape": [-1], "max_len": 8},
            },
            {
                "probabilities": [
                    {"field": "scores"},
                    {"field": "predicted", "transform": "argmax"},
                    {"field": "label", "transform": "argmax", "labels": ["a", "b"]},
                    {"field": "top", "transform": "top_k", "k": 2},
                ],
                "score": {"field": "positive", "transform": "threshold"},
            },
        )
        == []
    )


@pytest.mark.parametrize(
    ("inputs", "outputs", "code", "message"),
    [
        ({"x": {"field": "pixel", "shape": [8, 8, 1]}}, {}, "unknown-tensor-field", "'pixel'"),
        ({"x": {"field": "pixels", "shape": [64]}}, {}, "tensor-field-type", "needs array<number>"),
        ({"x": {"field": "review"}}, {}, "tensor-field-type", "is string"),
        ({"x": {"field": "count", "dtype": "string"}}, {}, "tensor-field-type", "needs string"),
        ({"x": {"field": "blob", "shape": [-1]}}, {}, "tensor-field-type", "is bytes"),
        ({"x": {"fields": ["count", "review"]}}, {}, "tensor-field-type", "must be a number"),
        (
            {"x": "count"},
            {"y": {"field": "predicted", "transform": "top_k"}},
            "tensor-field-type",
            "top_k writes",
        ),
        (
            {"x": "count"},
            {"y": {"field": "label", "transform": "argmax"}},
            "tensor-field-type",
            "a class index (int or long)",
        ),
        (
            {"x": "count"},
            {"y": {"field": "scores", "transform": "threshold"}},
            "tensor-field-type",
            "threshold writes a boolean",
        ),
        ({"x": "count"}, {"y": {"field": "score"}}, "unknown-tensor-field", "'score'"),
    ],
)
def test_schema_problems_have_stable_codes(
    inputs: Any, outputs: Any, code: str, message: str
) -> None:
    found = _problems(inputs, outputs)
    assert len(found) == 1, found
    assert found[0][0] == code and message in found[0][1]


@pytest.mark.parametrize(
    ("spec", "value", "reason"),
    [
        ({"dtype": "int32"}, 3_000_000_000, "out of the range of int32"),
        ({"dtype": "int64", "shape": [-1]}, [1.5, 2.0], "fractions"),
        ({"dtype": "bool"}, 0.2, "other than 0 and 1"),
        ({"dtype": "float32", "shape": [2]}, ["a", "b"], "does not hold numbers"),
    ],
)
def test_casts_that_would_change_a_value_are_refused(
    spec: dict[str, Any], value: Any, reason: str
) -> None:
    bound = _bound({"x": {"field": "v", **spec}})
    with pytest.raises(t.RecordErrors) as caught:
        bound.encode([{"v": value}])
    assert reason in caught.value.errors[0]


def test_a_pad_that_is_not_of_the_inputs_dtype_is_a_config_error() -> None:
    with pytest.raises(t.MappingError, match="pad '<pad>' is not a value of dtype int64"):
        t.parse_inputs({"ids": {"field": "ids", "dtype": "int64", "shape": [-1], "pad": "<pad>"}})
    with pytest.raises(t.MappingError, match="max_len must be a positive integer"):
        t.parse_inputs({"ids": {"field": "ids", "shape": [-1], "max_len": True}})


def test_one_value_per_record_is_written_as_a_number_to_a_numeric_field() -> None:
    bound = _bound(IMAGE, {"score": {"field": "risk"}})
    (first, second) = bound.decode(
        {"score": np.array([[0.25], [0.5]])}, 2, scalar_fields=frozenset({"risk"})
    )
    assert (first["risk"], second["risk"]) == (0.25, 0.5)
    with pytest.raises(t.MappingError, match="holds one number"):
        bound.decode({"score": np.zeros((2, 3))}, 2, scalar_fields=frozenset({"risk"}))


def test_a_v1_answer_without_output_names_fills_the_mappings_only_output() -> None:
    bound = _bound(IMAGE, {"probabilities": {"field": "predicted", "transform": "argmax"}})
    (row,) = bound.decode({t.ONLY: np.array([[0.1, 0.9]])}, 1)
    assert row == {"predicted": 1}
