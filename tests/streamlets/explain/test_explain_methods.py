"""Attributions with known answers: linear models, completeness, SHAP agreement, answer parsing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streamflow.models.embedded import load_embedded
from streamflow.models.remote import PermanentError
from streamflow.streamlets.explain import gradients, methods
from streamflow.streamlets.explain.predicate import Predicate, PredicateError
from streamflow.streamlets.explain.selection import Budget, Selector
from tests.model_fixtures import WineModels
from tests.streamlets.explain import explain_support as e

BASELINE = [0.5, -1.0]


def _explain(tmp_path: Path, method: str, rows: int = 40, **config: object) -> list[dict]:
    tmp_path.mkdir(exist_ok=True)
    h = e.harness(tmp_path, method=method, **config)
    h.control("model", e.descriptor(1, e.linear_model(tmp_path / "linear.keras")))
    assert e.settle(h, 1)["state"] == "serving"
    h.feed("in", e.points(rows, seed=4), keys=[f"k{i}" for i in range(rows)])
    h.run()
    assert not h.dead_letters
    return h.values("out")


def test_integrated_gradients_of_a_linear_model_are_w_times_x_minus_baseline(
    tmp_path: Path,
) -> None:
    explanations = _explain(tmp_path, "integrated-gradients", steps=8, baseline_values=BASELINE)
    assert len(explanations) == 40
    for explanation in explanations:
        x = np.array([a["value"] for a in explanation["attributions"]])
        target = explanation["target"]
        f = x @ e.WEIGHTS + e.BIAS
        assert target == int(np.argmax(f))  # the predicted class, by default
        expected = e.WEIGHTS[:, target] * (x - BASELINE)
        np.testing.assert_allclose(e.attributions(explanation), expected, atol=1e-3)
        # completeness: the attributions sum to f(x) - f(baseline)
        f_baseline = np.array(BASELINE) @ e.WEIGHTS[:, target] + e.BIAS[target]
        assert explanation["baseline_prediction"] == pytest.approx(f_baseline, abs=1e-4)
        total = e.attributions(explanation).sum()
        assert total == pytest.approx(explanation["prediction"][target] - f_baseline, abs=1e-3)
        assert [a["baseline"] for a in explanation["attributions"]] == BASELINE
        assert explanation["method"] == "INTEGRATED_GRADIENTS"
        # input_fields: one stacked input, named as the model names it, features by field
        assert explanation["input"] == "features" and explanation["shape"] == [2]
        assert [a["feature"] for a in explanation["attributions"]] == e.FEATURES
        assert explanation["fixed_inputs"] == []


def test_kernel_explainer_agrees_with_integrated_gradients_on_a_linear_model(
    tmp_path: Path,
) -> None:
    common = {"target": 1, "background_size": 60, "background_clusters": 60}
    ig = _explain(tmp_path, "integrated-gradients", steps=8, baseline="mean", **common)
    kernel = _explain(tmp_path / "k", "shap-kernel", samples=64, **common)
    assert [k["method"] for k in kernel] == ["SHAP_KERNEL"] * len(kernel)
    for a, b in zip(ig, kernel, strict=True):
        # both measure against the background mean (Kernel exactly, on a linear model)
        np.testing.assert_allclose(e.attributions(a), e.attributions(b), atol=1e-3)
        assert a["baseline_prediction"] == pytest.approx(b["baseline_prediction"], abs=1e-3)


def test_shap_gradient_explainer_approximates_the_linear_answer(tmp_path: Path) -> None:
    explanations = _explain(
        tmp_path, "shap-gradient", target=0, samples=400, rows=30, background_size=20
    )
    assert {x["method"] for x in explanations} == {"SHAP_GRADIENT"}
    for explanation in explanations:
        x = np.array([a["value"] for a in explanation["attributions"]])
        mean = np.array([a["baseline"] for a in explanation["attributions"]])
        # expected gradients sample the background: close to w * (x - mean), not exact
        np.testing.assert_allclose(
            e.attributions(explanation), e.WEIGHTS[:, 0] * (x - mean), atol=0.35
        )


def test_integrated_gradients_are_complete_on_the_wine_classifier(
    wine_models: WineModels, tmp_path: Path
) -> None:
    model = load_embedded(
        kind="KERAS", artifact=wine_models.v1.keras_file, parameters={}, cache_dir=tmp_path
    )
    (name,), (output,) = model.signature.inputs, model.signature.outputs
    x = wine_models.x[:30].astype(np.float32)
    f = model.run({name: x})[output]
    targets = np.argmax(f, axis=1)
    result = gradients.integrated_gradients(
        model.call_named,
        {name: x},
        explained=[name],
        baselines={name: wine_models.x.mean(axis=0)},
        output=output,
        targets=targets,
        steps=128,
    )
    gap = result.values[name].sum(axis=1) - (f[np.arange(30), targets] - result.baseline_output)
    assert np.max(np.abs(gap)) < 5e-3


def test_parse_explain_reads_plain_and_alibi_answers() -> None:
    plain, _ = methods.parse_explain({"explanations": [[1, 2], {"attributions": [3, 4]}]}, 2)
    np.testing.assert_array_equal(plain, [[1, 2], [3, 4]])
    shap_values = [[[1, 2]], [[3, 4]]]  # (outputs, rows, features)
    per_output, expected = methods.parse_explain(
        {"data": {"shap_values": shap_values, "expected_value": [0.1, 0.2]}}, 1
    )
    assert per_output.shape == (2, 1, 2) and expected is not None
    alibi_ig, _ = methods.parse_explain({"data": {"attributions": [[[5, 6]]]}}, 1)
    np.testing.assert_array_equal(alibi_ig, [[5, 6]])
    with pytest.raises(PermanentError, match="no attributions"):
        methods.parse_explain({"predictions": [1]}, 1)


def test_predicates_are_parsed_safely() -> None:
    p = Predicate("x > 1 and color in ('red', 'blue') or predicted == 2")
    assert p.matches({"x": 2, "color": "red", "predicted": 0})
    assert not p.matches({"x": 0, "color": "red", "predicted": 1})
    assert not p.matches({"color": "red", "predicted": None})  # missing names never match
    for bad in ("__import__('os')", "x.real > 1", "[a for a in b]", "x >"):
        with pytest.raises(PredicateError):
            Predicate(bad)


def test_a_budget_sheds_down_to_what_fits() -> None:
    budget = Budget(seconds=1.0)
    assert budget.affordable(500) == 500  # nothing known yet
    budget.spent(2.0, 10)  # 0.2 s each
    assert budget.affordable(500) == 5
    budget.spent(100.0, 1)
    assert budget.affordable(500) == 1  # always at least one, so the estimate can recover
    selector = Selector(sample_rate=0.1, drift_rate=1.0, low_confidence=0.0, predicate=None)
    assert not selector.needs_predictions
    assert Selector(0.1, 1.0, 0.0, Predicate("confidence < 0.5")).needs_predictions
