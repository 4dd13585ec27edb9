"""Shared helpers for the explanation tests: small Keras models with known answers, descriptors."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from streamflow import ControlInlet, Inlet
from streamflow.streamlets.explain import ModelExplainer
from streamflow.testkit import StreamletHarness

SCHEMAS = Path(__file__).parents[1] / "drift" / "schemas"
FEATURES = ["x", "y"]
WEIGHTS = np.array([[1.5, -2.0, 0.5], [-0.75, 3.0, 1.0]], dtype=np.float32)  # (features, outputs)
BIAS = np.array([0.25, -0.5, 1.0], dtype=np.float32)


class PointExplainer(ModelExplainer):
    inp = Inlet("in", "tests.drift.Point")


class DriftAwareExplainer(ModelExplainer):
    inp = Inlet("in", "tests.drift.Point")
    drift = ControlInlet("drift", "streamflow.ml.DriftReport")


def linear_model(path: Path, *, outputs: int = 3, activation: str | None = None) -> Path:
    """A linear Keras model, f(x) = x W + b (then ``activation``), saved as a .keras file."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    inputs = keras.Input(shape=(len(FEATURES),), name="features")
    dense = keras.layers.Dense(outputs, activation=activation, name="linear")
    model = keras.Model(inputs, dense(inputs))
    dense.set_weights([WEIGHTS[:, :outputs], BIAS[:outputs]])
    model.save(path)
    return path


def non_differentiable_model(path: Path) -> Path:
    """A model whose output is a step function of its input: no gradient reaches the input."""
    import keras

    inputs = keras.Input(shape=(len(FEATURES),), name="features")
    bins = keras.layers.Discretization(bin_boundaries=[-1.0, 0.0, 1.0])(inputs)
    counts = keras.layers.CategoryEncoding(num_tokens=4, output_mode="count")(bins)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(counts))
    model.save(path)
    return path


def descriptor(version: int, model: Path | None = None, **fields: Any) -> dict[str, Any]:
    data = model.read_bytes() if model is not None else None
    return {
        "name": "points",
        "version": version,
        "kind": "KERAS",
        "data": data,
        "location": None,
        "sha256": hashlib.sha256(data).hexdigest() if data is not None else None,
        "parameters": {},
        "description": f"v{version}",
        "created_at": dt.datetime.now(dt.UTC),
        **fields,
    }


def harness(
    tmp_path: Path, cls: type[ModelExplainer] = PointExplainer, **config: Any
) -> StreamletHarness:
    defaults = {
        "input_fields": FEATURES,
        "cache_dir": str(tmp_path / "cache"),
        "sample_rate": 1.0,
        "background_size": 50,
    }
    return StreamletHarness(
        cls, config={**defaults, **config}, schema_paths=[SCHEMAS], name="explain"
    )


def settle(h: StreamletHarness, version: int, *, timeout: float = 60.0) -> dict[str, Any]:
    """Run between-batches until ``version`` reaches a final state; that status record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for out in h.between_batches():
            value = out.value
            if (
                out.outlet == "status"
                and value["version"] == version
                and value["state"] != "loading"
            ):
                return value
        time.sleep(0.02)
    raise AssertionError(f"version {version} reached no final state in {timeout:.0f}s")


def points(n: int, *, seed: int, start: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    xy = rng.normal(size=(n, 2))
    return [
        {"id": f"p{start + i}", "x": float(a), "y": float(b), "color": "red"}
        for i, (a, b) in enumerate(xy)
    ]


def attributions(explanation: dict[str, Any]) -> np.ndarray:
    return np.array([a["attribution"] for a in explanation["attributions"]])
