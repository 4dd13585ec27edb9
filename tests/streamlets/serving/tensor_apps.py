"""Serving streamlets bound to the test schemas of models with named, typed tensors."""

from __future__ import annotations

from streamflow import Inlet, Outlet

__all__ = ["LABELS", "MIXED_CONFIG", "TEXT_CONFIG", "MixedServing", "Outlet", "TextServing"]
from streamflow.streamlets.serving import ModelServing

LABELS = ["cat", "dog", "eel"]

MIXED_CONFIG = {
    "inputs": {
        "features": {"field": "features", "dtype": "float32", "shape": [4]},
        "region": {"field": "region", "dtype": "int64"},
    },
    "outputs": {
        "probabilities": [
            {"field": "scores"},
            {"field": "predicted", "transform": "argmax", "labels": LABELS},
            {"field": "top", "transform": "top_k", "k": 2, "labels": LABELS},
        ],
        "score": {"field": "positive", "transform": "threshold", "threshold": 0.5},
    },
}

TEXT_CONFIG = {
    "inputs": {"text": {"field": "text", "dtype": "string"}},
    "outputs": {
        "sentiment": {"field": "sentiment", "transform": "argmax", "labels": ["neg", "pos"]}
    },
}


class MixedServing(ModelServing):
    inp = Inlet("in", "tests.serving.Mixed")
    out = Outlet("out", "tests.serving.MixedOut")


class TextServing(ModelServing):
    inp = Inlet("in", "tests.serving.Mixed")
    out = Outlet("out", "tests.serving.TextOut")
