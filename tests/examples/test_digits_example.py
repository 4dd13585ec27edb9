"""The digits example: its ONNX graph, its samples, and its classifier serving each artifact."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamflow.models.artifacts import pack_directory
from streamflow.schema import SchemaStore, SingleObjectCodec
from streamflow.testkit import StreamletHarness
from tests.examples import support
from tests.examples.example_models import DIGITS, DigitsModels

if str(DIGITS) not in sys.path:
    sys.path.insert(0, str(DIGITS))

import digits_app
import digits_monitoring

TOLERANCE = 1e-5
CONFIG = support.blueprint_config(DIGITS / "classifier.yaml", "classifier")
BYTES_CONFIG = support.blueprint_config(DIGITS / "classifier-bytes.yaml", "classifier")


def test_the_onnx_graph_matches_keras_on_every_image(digits_models: DigitsModels) -> None:
    import onnx
    import onnxruntime

    proto = onnx.load(str(digits_models.onnx_file))
    assert {op.domain for op in proto.opset_import} == {""}
    assert {node.domain for node in proto.graph.node} == {""}
    session = onnxruntime.InferenceSession(
        str(digits_models.onnx_file), providers=["CPUExecutionProvider"]
    )
    [image] = session.get_inputs()
    [probabilities] = session.get_outputs()
    assert (image.name, image.type, image.shape[1:]) == ("image", "tensor(float)", [8, 8, 1])
    assert (probabilities.name, probabilities.shape[1:]) == ("probabilities", [10])
    (theirs,) = session.run(None, {"image": digits_models.x})
    ours = digits_models.models[1].predict(digits_models.x, verbose=0)
    np.testing.assert_allclose(theirs, ours, atol=TOLERANCE)


def test_the_saved_model_names_its_tensors(digits_models: DigitsModels) -> None:
    import tensorflow as tf

    signature = tf.saved_model.load(str(digits_models.saved_model)).signatures["serving_default"]
    [(name, spec)] = signature.structured_input_signature[1].items()
    assert (name, spec.dtype, spec.shape.as_list()) == ("image", tf.float32, [None, 8, 8, 1])
    assert list(signature.structured_outputs) == ["probabilities"]


def test_the_versions_are_accurate_and_differ(digits_models: DigitsModels) -> None:
    x, y = digits_models.x, digits_models.y
    first, second = (digits_models.models[v].predict(x, verbose=0) for v in (1, 2))
    assert np.mean(first.argmax(axis=1) == y) > 0.9
    assert np.mean(second.argmax(axis=1) == y) > 0.9
    assert not np.allclose(first, second, atol=1e-3)


def test_both_sample_files_hold_the_same_images_and_fit_their_schemas(
    digits_models: DigitsModels,
) -> None:
    store = SchemaStore([support.SCHEMAS])
    nested = support.read_jsonl(digits_models.samples)
    raw = support.read_jsonl(digits_models.samples_bytes)
    assert len(nested) == len(raw) == len(digits_models.y) == 1797
    assert [r["id"] for r in nested] == [r["id"] for r in raw]
    images = np.asarray([r["pixels"] for r in nested], dtype=np.float32)
    tensors = np.stack(
        [np.frombuffer(base64.b64decode(r["pixels"]), "<f4").reshape(8, 8, 1) for r in raw]
    )
    np.testing.assert_array_equal(images, tensors)
    assert images.min() == 0.0 and images.max() == 1.0
    for schema, row in (
        ("examples.digits.DigitImage", nested[0]),
        (
            "examples.digits.DigitImageBytes",
            {**raw[0], "pixels": base64.b64decode(raw[0]["pixels"])},
        ),
    ):
        codec = SingleObjectCodec(store.get(schema), store=store)
        assert codec.decode(codec.encode(row)) == row


def _expected(digits_models: DigitsModels, values: list[dict[str, Any]], version: int) -> Any:
    pixels = np.asarray(
        [
            np.frombuffer(v["pixels"], "<f4").reshape(8, 8, 1)  # the bytes form
            if isinstance(v["pixels"], bytes)
            else v["pixels"]
            for v in values
        ],
        dtype=np.float32,
    )
    return digits_models.models[version].predict(pixels, verbose=0)


def _check(got: list[dict[str, Any]], values: list[dict[str, Any]], expected: Any) -> None:
    assert [g["id"] for g in got] == [v["id"] for v in values]
    assert [g["label"] for g in got] == [v["label"] for v in values]
    np.testing.assert_allclose([g["scores"] for g in got], expected, atol=TOLERANCE)
    assert [g["predicted"] for g in got] == expected.argmax(axis=1).tolist()
    for g, row in zip(got, expected, strict=True):
        assert [t["label"] for t in g["top"]] == [str(i) for i in np.argsort(-row)[:3]]
        assert g["top"][0]["score"] == pytest.approx(float(row.max()), abs=TOLERANCE)


@pytest.mark.parametrize("kind", ["KERAS", "TF_SAVED_MODEL", "ONNX"])
def test_the_classifier_serves_every_artifact_through_the_blueprints_mapping(
    digits_models: DigitsModels, tmp_path: Path, kind: str
) -> None:
    data = {
        "KERAS": lambda: digits_models.keras_files[1].read_bytes(),
        "TF_SAVED_MODEL": lambda: pack_directory(digits_models.saved_model),
        "ONNX": lambda: digits_models.onnx_file.read_bytes(),
    }[kind]()
    values = support.read_jsonl(digits_models.samples, limit=64)
    with support.classifier(digits_app.DigitClassifier, CONFIG, tmp_path) as h:
        status = support.serve(h, support.descriptor("digits", 1, kind, data))
        assert status["state"] == "serving", status
        got = support.predictions(h, values)
    _check(got, values, _expected(digits_models, values, 1))
    assert {(g["model"], g["model_version"]) for g in got} == {("digits", 1)}


def test_the_bytes_classifier_reads_raw_tensors_and_switches_versions(
    digits_models: DigitsModels, tmp_path: Path
) -> None:
    rows = support.read_jsonl(digits_models.samples_bytes, limit=40)
    values = [{**r, "pixels": base64.b64decode(r["pixels"])} for r in rows]
    with support.classifier(digits_app.DigitBytesClassifier, BYTES_CONFIG, tmp_path) as h:
        for version in (1, 2):
            data = digits_models.keras_files[version].read_bytes()
            status = support.serve(h, support.descriptor("digits", version, "KERAS", data))
            assert status["state"] == "serving", status
            got = support.predictions(h, values)
            _check(got, values, _expected(digits_models, values, version))
            assert {g["model_version"] for g in got} == {version}


def test_a_record_of_the_wrong_shape_is_dead_lettered_alone(
    digits_models: DigitsModels, tmp_path: Path
) -> None:
    values = support.read_jsonl(digits_models.samples, limit=5)
    values[2] = {**values[2], "pixels": values[2]["pixels"][:7]}  # a row short
    with support.classifier(digits_app.DigitClassifier, CONFIG, tmp_path) as h:
        support.serve(
            h, support.descriptor("digits", 1, "KERAS", digits_models.keras_files[1].read_bytes())
        )
        got = support.predictions(h, values)
        assert [g["id"] for g in got] == [v["id"] for i, v in enumerate(values) if i != 2]
        [dead] = h.dead_letters
        assert "pixels" in str(dead.error)


def test_the_drifting_feed_moves_and_noises_images_after_drift_after(
    digits_models: DigitsModels,
) -> None:
    config = {"dataset": str(digits_models.samples), "drift_after": 3, "drift_noise": 0.0}
    with StreamletHarness(
        digits_monitoring.DriftingDigitFeed, config=config, schema_paths=[support.SCHEMAS]
    ) as h:
        values = [o.value for o in h.run_source(limit=6)]
    originals = support.read_jsonl(digits_models.samples, limit=6)
    for index, (value, original) in enumerate(zip(values, originals, strict=True)):
        image, before = np.asarray(value["pixels"]), np.asarray(original["pixels"])
        if index < 3:
            np.testing.assert_array_equal(image, before)
        else:
            np.testing.assert_array_equal(image[:, 2:], before[:, :-2])
            assert not image[:, :2].any()


def test_the_drift_noise_stays_in_range_and_is_seeded() -> None:
    image = np.full((8, 8, 1), 0.5).tolist()
    first = digits_monitoring.shifted(image, columns=0, noise=0.3, rng=np.random.default_rng(1))
    again = digits_monitoring.shifted(image, columns=0, noise=0.3, rng=np.random.default_rng(1))
    assert first == again
    pixels = np.asarray(first)
    assert pixels.shape == (8, 8, 1) and pixels.min() >= 0.0 and pixels.max() <= 1.0
    assert pixels.std() > 0.1
