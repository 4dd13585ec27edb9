"""The reviews example: its generated corpus, and a raw-text model served through the mapping."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamflow import devkit
from streamflow.models.artifacts import pack_directory
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.examples import support
from tests.examples.example_models import REVIEWS, ReviewsModel

if str(REVIEWS) not in sys.path:
    sys.path.insert(0, str(REVIEWS))

import corpus
import reviews_app

CONFIG = support.blueprint_config(REVIEWS / "classifier.yaml", "classifier")


def test_the_corpus_is_deterministic_balanced_and_not_trivial() -> None:
    reviews = corpus.generate()
    assert reviews == corpus.generate()
    assert corpus.generate(seed=12) != reviews
    assert len(reviews) == 3000 and len({text for text, _ in reviews}) > 1500
    labels = [label for _, label in reviews]
    assert 0.45 < sum(labels) / len(labels) < 0.55
    # the same products and openers in both classes, so no single word gives it away
    words = [set(text.lower().split()) for text, _ in reviews]
    for product in ("kettle", "headphones", "router"):
        assert {label for w, label in zip(words, labels, strict=True) if product in w} == {0, 1}


def test_the_model_takes_raw_strings_and_is_accurate(reviews_model: ReviewsModel) -> None:
    import keras

    loaded = keras.models.load_model(reviews_model.keras_file, safe_mode=True, compile=False)
    [review] = loaded.inputs
    assert (review.name, review.dtype, tuple(review.shape)) == ("review", "string", (None,))
    assert loaded.output_names == ["sentiment"]
    scores = loaded.predict(reviews_model.x, verbose=0)
    assert 0.9 < np.mean(scores.argmax(axis=1) == reviews_model.y) < 1.0  # labels are noisy


def test_the_saved_model_takes_a_string_tensor(reviews_model: ReviewsModel) -> None:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(reviews_model.saved_model))
    signature = loaded.signatures["serving_default"]
    [(name, spec)] = signature.structured_input_signature[1].items()
    assert (name, spec.dtype, spec.shape.as_list()) == ("review", tf.string, [None])
    texts = reviews_model.x[:8].tolist()
    result = signature(review=tf.constant(texts))["sentiment"].numpy()
    np.testing.assert_allclose(
        result, reviews_model.model.predict(reviews_model.x[:8], verbose=0), atol=1e-6
    )


def test_the_samples_fit_the_schema(reviews_model: ReviewsModel) -> None:
    store = SchemaStore([support.SCHEMAS])
    codec = SingleObjectCodec(store.get(reviews_app.REVIEW_SCHEMA), store=store)
    rows = support.read_jsonl(reviews_model.samples)
    assert len(rows) == 3000
    assert all(codec.decode(codec.encode(row)) == row for row in rows[:50])


@pytest.mark.parametrize("kind", ["KERAS", "TF_SAVED_MODEL"])
def test_the_classifier_labels_reviews_through_the_blueprints_mapping(
    reviews_model: ReviewsModel, tmp_path: Path, kind: str
) -> None:
    data = (
        reviews_model.keras_file.read_bytes()
        if kind == "KERAS"
        else pack_directory(reviews_model.saved_model)
    )
    values = support.read_jsonl(reviews_model.samples, limit=80)
    with support.classifier(reviews_app.SentimentClassifier, CONFIG, tmp_path) as h:
        status = support.serve(h, support.descriptor("reviews", 1, kind, data))
        assert status["state"] == "serving", status
        got = support.predictions(h, values)
    expected = reviews_model.model.predict(
        np.array([v["review"] for v in values], dtype=object), verbose=0
    )
    assert [(g["id"], g["review"], g["label"]) for g in got] == [
        (v["id"], v["review"], v["label"]) for v in values
    ]
    np.testing.assert_allclose([g["scores"] for g in got], expected, atol=1e-5)
    assert [g["predicted"] for g in got] == [reviews_app.LABELS[i] for i in expected.argmax(1)]
    truth = [reviews_app.LABELS[v["label"]] for v in values]
    right = sum(t == g["predicted"] for t, g in zip(truth, got, strict=True))
    assert right / len(values) > 0.85


class _ReadmeReviews(reviews_app.SentimentClassifier):
    """The README's preprocess/postprocess example, as written there."""

    def preprocess(self, records: list[Any]) -> dict[str, np.ndarray]:
        text = [r.value["review"].strip().lower() for r in records]
        return {"review": np.array(text, dtype=object)}

    def postprocess(self, records: list[Any], outputs: dict[str, np.ndarray]) -> list[dict]:  # type: ignore[type-arg]
        return [
            {
                "id": r.value["id"],
                "review": r.value["review"],
                "scores": p.tolist(),
                "predicted": "positive" if p[1] > 0.5 else "negative",
            }
            for r, p in zip(records, outputs["sentiment"], strict=True)
        ]


def test_the_readmes_preprocess_and_postprocess_hooks_serve_as_documented(
    reviews_model: ReviewsModel, tmp_path: Path
) -> None:
    config = {
        "inputs": {"review": {"field": "review", "dtype": "string"}},
        "outputs": {"sentiment": {"field": "scores"}},
    }
    values = support.read_jsonl(reviews_model.samples, limit=40)
    with support.classifier(_ReadmeReviews, config, tmp_path) as h:
        data = reviews_model.keras_file.read_bytes()
        assert support.serve(h, support.descriptor("reviews", 1, "KERAS", data))["state"] == (
            "serving"
        )
        got = support.predictions(h, values)
    expected = reviews_model.model.predict(
        np.array([v["review"].strip().lower() for v in values], dtype=object), verbose=0
    )
    assert [g["predicted"] for g in got] == [
        "positive" if p[1] > 0.5 else "negative" for p in expected
    ]
    assert all(g["model_version"] == 1 for g in got)


def test_the_classifier_sends_raw_text_to_a_model_server_as_v2_bytes(
    reviews_model: ReviewsModel,
    model_server_factory: Callable[..., devkit.ModelServer],
    tmp_path: Path,
) -> None:
    server = model_server_factory(model_path=reviews_model.keras_file, model_name="reviews")
    values = support.read_jsonl(reviews_model.samples, limit=40)
    config = {**CONFIG, "allowlist": [f"{server.url}/"]}  # its exact origin
    with support.classifier(reviews_app.SentimentClassifier, config, tmp_path) as h:
        remote = {
            **support.descriptor("reviews", 1, "OPEN_INFERENCE_V2", b""),
            "data": None,
            "sha256": None,
            "location": server.url,
            "parameters": {"model": "reviews"},
        }
        status = support.serve(h, remote)
        assert status["state"] == "serving", status
        got = support.predictions(h, values)
    expected = reviews_model.model.predict(
        np.array([v["review"] for v in values], dtype=object), verbose=0
    )
    np.testing.assert_allclose([g["scores"] for g in got], expected, atol=1e-5)
    assert [g["predicted"] for g in got] == [reviews_app.LABELS[i] for i in expected.argmax(1)]
