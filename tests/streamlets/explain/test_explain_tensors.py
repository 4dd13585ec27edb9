"""Explaining models with named tensor inputs: images, image + vector, and text it cannot explain.

Integrated gradients are checked by completeness against the model itself (the
attributions sum to f(x) - f(baseline)), with the baseline output computed here
independently. Text inputs must never fail the explainer: it says the method
does not apply, counts the records, and still explains the float inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamflow.models.embedded import load_embedded
from streamflow.streamlets.explain import gradients
from tests.streamlets.explain import explain_support as e
from tests.streamlets.explain import tensor_support as t

ROWS = 6


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("explain-models")
    built = {
        "cnn": t.cnn(where / "cnn.keras"),
        "two": t.image_and_vector(where / "two.keras"),
        "text": t.text_only(where / "text.keras"),
        "mixed": t.text_and_vector(where / "mixed.keras"),
        "scored": t.vector_and_id(where / "scored.keras"),
        "sequence": t.sequence(where / "sequence.keras"),
    }
    return {"dir": where, **built}


def _pixels(rows: list[dict[str, Any]]) -> np.ndarray:
    return np.array([r["pixels"] for r in rows], dtype=np.float32)


def _features(rows: list[dict[str, Any]]) -> np.ndarray:
    return np.array([r["features"] for r in rows], dtype=np.float32)


def test_integrated_gradients_of_an_image_cnn_are_complete(
    models: dict[str, Any], tmp_path: Path
) -> None:
    model = load_embedded(
        kind="KERAS", artifact=models["dir"] / "cnn.keras", parameters={}, cache_dir=tmp_path
    )
    x = _pixels(t.samples(ROWS, seed=1))
    f = model.run({"image": x})["probabilities"]
    targets = np.argmax(f, axis=1)
    result = gradients.integrated_gradients(
        model.call_named,
        {"image": x},
        explained=["image"],
        baselines={"image": np.zeros((), np.float32)},
        output="probabilities",
        targets=targets,
        steps=64,
    )
    assert result.values["image"].shape == (ROWS, 8, 8, 1)
    f_zero = np.asarray(models["cnn"](np.zeros((1, 8, 8, 1), np.float32)))[0, targets]
    np.testing.assert_allclose(result.baseline_output, f_zero, atol=1e-5)
    total = result.values["image"].reshape(ROWS, -1).sum(axis=1)
    np.testing.assert_allclose(total, f[np.arange(ROWS), targets] - f_zero, atol=2e-3)
    assert np.abs(total).max() > 1e-3  # not trivially complete


def test_a_digit_image_is_explained_as_an_8x8x1_tensor(
    models: dict[str, Any], tmp_path: Path
) -> None:
    h, status = t.serving(tmp_path, models["dir"] / "cnn.keras", inputs={"image": t.IMAGE})
    assert status["state"] == "serving", status["message"]
    rows = t.samples(ROWS, seed=2)
    h.feed("in", rows, keys=[r["id"] for r in rows])
    h.run()
    explained = h.values("out")
    assert len(explained) == ROWS and not h.dead_letters
    f_zero = np.asarray(models["cnn"](np.zeros((1, 8, 8, 1), np.float32)))[0]
    for explanation, row in zip(explained, rows, strict=True):
        assert explanation["input"] == "image" and explanation["shape"] == [8, 8, 1]
        assert explanation["method"] == "INTEGRATED_GRADIENTS"
        assert explanation["fixed_inputs"] == []
        features = [a["feature"] for a in explanation["attributions"]]
        assert len(features) == 64
        assert features[:3] == ["image[0,0,0]", "image[0,1,0]", "image[0,2,0]"]
        assert features[-1] == "image[7,7,0]"  # row-major
        values = [a["value"] for a in explanation["attributions"]]
        np.testing.assert_allclose(values, np.ravel(row["pixels"]), atol=1e-6)
        assert {a["baseline"] for a in explanation["attributions"]} == {0.0}  # zeros for images
        target = explanation["target"]
        assert target == int(np.argmax(explanation["prediction"]))
        assert explanation["baseline_prediction"] == pytest.approx(f_zero[target], abs=1e-5)
        total = e.attributions(explanation).sum()
        gap = explanation["prediction"][target] - explanation["baseline_prediction"]
        assert total == pytest.approx(gap, abs=2e-3)


def test_an_image_and_a_vector_get_one_explanation_each_and_are_complete_together(
    models: dict[str, Any], tmp_path: Path
) -> None:
    h, status = t.serving(
        tmp_path, models["dir"] / "two.keras", inputs={"image": t.IMAGE, "features": t.VECTOR}
    )
    assert status["state"] == "serving", status["message"]
    rows = t.samples(ROWS, seed=3)
    h.feed("in", rows)
    h.run()
    grouped = t.by_record(h.values("out"))
    assert sorted(grouped) == list(range(ROWS))
    zeros = {"image": np.zeros((1, 8, 8, 1), np.float32), "features": np.zeros((1, 13), np.float32)}
    f_zero = np.asarray(models["two"](zeros))[0]
    for offset, pair in grouped.items():
        assert set(pair) == {"image", "features"}
        assert pair["image"]["shape"] == [8, 8, 1] and pair["features"]["shape"] == [13]
        assert [a["feature"] for a in pair["features"]["attributions"]][12] == "features[12]"
        np.testing.assert_allclose(
            [a["value"] for a in pair["features"]["attributions"]], rows[offset]["features"]
        )
        image, features = pair["image"], pair["features"]
        assert image["target"] == features["target"]
        assert image["baseline_prediction"] == features["baseline_prediction"]
        target = image["target"]
        assert image["baseline_prediction"] == pytest.approx(f_zero[target], abs=1e-5)
        total = e.attributions(image).sum() + e.attributions(features).sum()
        gap = image["prediction"][target] - image["baseline_prediction"]
        assert total == pytest.approx(gap, abs=2e-3)
        assert abs(e.attributions(features).sum()) > 1e-4  # both inputs take part


def test_a_text_only_model_is_not_explained_and_says_so(
    models: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="streamflow.streamlets.explain"):
        h, status = t.serving(tmp_path, models["dir"] / "text.keras", inputs={"review": t.TEXT})
    assert status["state"] == "serving"
    assert "integrated-gradients does not apply to this model" in status["message"]
    assert "input 'review' (string: text)" in status["message"]
    for batch in range(2):
        h.feed("in", t.samples(ROWS, seed=10 + batch))
        h.run()
    assert h.values("out") == [] and not h.dead_letters and h.pending == 0
    assert h.context.skipped["not-applicable"] == 2 * ROWS
    said = [r for r in caplog.records if "does not apply" in r.getMessage()]
    assert len(said) == 1  # once per model, not per batch


def test_text_is_held_fixed_while_the_vector_beside_it_is_explained(
    models: dict[str, Any], tmp_path: Path
) -> None:
    h, status = t.serving(
        tmp_path,
        models["dir"] / "mixed.keras",
        inputs={"review": t.TEXT, "features": t.VECTOR},
        baseline="zeros",
    )
    assert status["state"] == "serving", status["message"]
    assert "does not apply to input 'review' (string: text)" in status["message"]
    rows = t.samples(ROWS, seed=4)
    h.feed("in", rows)
    h.run()
    explained = h.values("out")
    assert [v["input"] for v in explained] == ["features"] * ROWS
    assert h.context.skipped["not-applicable"] == ROWS
    for explanation, row in zip(explained, rows, strict=True):
        assert explanation["fixed_inputs"] == ["review"]
        target = explanation["target"]
        # the baseline keeps the record's own text: only the features go to zero
        at_baseline = models["mixed"](
            {"review": np.array([row["review"]]), "features": np.zeros((1, 13), np.float32)}
        )
        assert explanation["baseline_prediction"] == pytest.approx(
            float(np.asarray(at_baseline)[0, target]), abs=1e-5
        )
        total = e.attributions(explanation).sum()
        gap = explanation["prediction"][target] - explanation["baseline_prediction"]
        assert total == pytest.approx(gap, abs=2e-3)


def test_the_output_to_explain_is_chosen_by_name_and_an_id_input_is_held_fixed(
    models: dict[str, Any], tmp_path: Path
) -> None:
    inputs = {"features": t.VECTOR, "region": t.REGION}
    h, status = t.serving(tmp_path / "unnamed", models["dir"] / "scored.keras", inputs=inputs)
    assert status["state"] == "failed"  # two outputs, and none named
    assert "set explained_output" in status["message"]
    h, status = t.serving(
        tmp_path,
        models["dir"] / "scored.keras",
        inputs=inputs,
        explained_output="score",
        background_size=ROWS,
    )
    assert status["state"] == "serving", status["message"]
    assert "input 'region' (int64: not a float)" in status["message"]
    rows = t.samples(ROWS, seed=8)
    h.feed("in", rows + rows)  # the background is the first ROWS: explained from the last on
    h.run()
    explained = h.values("out")
    assert len(explained) == ROWS + 1
    mean = _features(rows).mean(axis=0)  # baseline auto: the mean, for a feature vector
    for explanation, row in zip(explained[1:], rows, strict=True):
        assert explanation["fixed_inputs"] == ["region"] and explanation["target"] == 0
        baseline = [a["baseline"] for a in explanation["attributions"]]
        np.testing.assert_allclose(baseline, mean, atol=1e-6)
        score = models["scored"](
            {"features": _features([row]), "region": np.array([row["region"]])}
        )["score"]
        assert explanation["prediction"] == pytest.approx([float(np.asarray(score)[0, 0])])
        total = e.attributions(explanation).sum()
        gap = explanation["prediction"][0] - explanation["baseline_prediction"]
        assert total == pytest.approx(gap, abs=2e-3)


def test_a_ragged_sequence_is_explained_with_the_batch_padded_shape(
    models: dict[str, Any], tmp_path: Path
) -> None:
    h, status = t.serving(tmp_path, models["dir"] / "sequence.keras", inputs={"events": t.EVENTS})
    assert status["state"] == "serving", status["message"]
    rows = t.samples(ROWS, seed=9)  # 1 to 4 events each
    h.feed("in", rows)
    h.run()
    explained = h.values("out")
    assert len(explained) == ROWS and not h.dead_letters
    for explanation, row in zip(explained, rows, strict=True):
        assert explanation["shape"] == [4, 4]  # padded to the longest in the batch
        values = np.array([a["value"] for a in explanation["attributions"]]).reshape(4, 4)
        np.testing.assert_allclose(values[: len(row["events"])], row["events"], atol=1e-6)
        padding = slice(len(row["events"]), None)
        assert not values[padding].any()
        # padding equals the zero baseline, so it moves nothing and is attributed nothing
        assert not e.attributions(explanation).reshape(4, 4)[padding].any()
        target = explanation["target"]
        total = e.attributions(explanation).sum()
        gap = explanation["prediction"][target] - explanation["baseline_prediction"]
        assert total == pytest.approx(gap, abs=2e-3)


def test_kernel_shap_explains_an_image_through_its_flattened_pixels(
    models: dict[str, Any], tmp_path: Path
) -> None:
    h, status = t.serving(
        tmp_path,
        models["dir"] / "cnn.keras",
        inputs={"image": t.IMAGE},
        method="shap-kernel",
        samples=200,
        background_size=5,
        background_clusters=5,
        budget="10m",  # explain them all, however slow the machine
    )
    assert status["state"] == "serving", status["message"]
    h.feed("in", t.samples(8, seed=5))
    h.run()
    explained = h.values("out")
    assert len(explained) == 4  # from the fifth on, against a background of the first five
    for explanation in explained:
        assert explanation["method"] == "SHAP_KERNEL" and explanation["shape"] == [8, 8, 1]
        target = explanation["target"]
        total = e.attributions(explanation).sum()  # SHAP's efficiency
        gap = explanation["prediction"][target] - explanation["baseline_prediction"]
        assert total == pytest.approx(gap, abs=2e-3)


@pytest.mark.parametrize(
    ("model", "inputs", "method", "said"),
    [
        ("mixed", {"review": t.TEXT, "features": t.VECTOR}, "shap-kernel", "also takes input"),
        ("two", {"image": t.IMAGE, "features": t.VECTOR}, "shap-gradient", "model has 2"),
        ("cnn", {"image": t.IMAGE}, "remote", "the input has shape [8, 8, 1]"),
    ],
)
def test_a_flat_feature_method_on_tensors_it_cannot_see_says_so_and_skips(
    models: dict[str, Any],
    tmp_path: Path,
    model: str,
    inputs: dict[str, Any],
    method: str,
    said: str,
) -> None:
    extra = {"explainer_url": "http://127.0.0.1:9"} if method == "remote" else {}
    h, status = t.serving(
        tmp_path, models["dir"] / f"{model}.keras", inputs=inputs, method=method, **extra
    )
    assert status["state"] == "serving"
    assert f"{method} does not apply to this model" in status["message"]
    assert said in status["message"]
    h.feed("in", t.samples(ROWS, seed=6))
    h.run()
    assert h.values("out") == [] and not h.dead_letters
    assert h.context.skipped["not-applicable"] == ROWS
    h.teardown()


def test_a_record_that_does_not_fit_is_skipped_and_the_rest_explained(
    models: dict[str, Any], tmp_path: Path
) -> None:
    h, _ = t.serving(tmp_path, models["dir"] / "cnn.keras", inputs={"image": t.IMAGE})
    rows = t.samples(4, seed=7)
    rows[1]["pixels"] = rows[1]["pixels"][:7]  # a 7x8 image
    h.feed("in", rows)
    h.run()
    assert sorted(v["offset"] for v in h.values("out")) == [0, 2, 3]
    assert h.context.skipped["invalid-input"] == 1
    assert not h.dead_letters  # serving dead-letters it; the explainer only skips it
