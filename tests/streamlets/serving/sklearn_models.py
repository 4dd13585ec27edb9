"""scikit-learn classifiers of the wine data, converted with skl2onnx, trained once per session.

The wine data ships inside scikit-learn (nothing is downloaded), and these
models never import TensorFlow: a replica that serves one loads onnxruntime
only. Each classifier is converted twice, as skl2onnx does by default (a label
output and a ZipMap of class -> probability) and with ``zipmap=False`` (a label
and a probabilities tensor), so a test can push either form to the example.
The features are in `WineFeatures`' field order, the order of the data set's
columns, so the scikit-learn model and the served one see the same rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
FEATURES_SCHEMA = ROOT / "schemas" / "examples" / "wine" / "WineFeatures.avsc"
#: the 13 measurements, as the example's schema names them (sklearn's column order)
FEATURES = [
    f["name"]
    for f in json.loads(FEATURES_SCHEMA.read_text())["fields"]
    if f["name"] not in ("id", "label")
]


@dataclass(frozen=True)
class SklearnModel:
    """One classifier: the fitted estimator and its ONNX forms (default and zipmap=False)."""

    name: str
    estimator: Any
    zipmap: Path  # skl2onnx's default: output_label + output_probability (a ZipMap)
    tensors: Path  # zipmap=False: label + probabilities


@dataclass(frozen=True)
class WineSklearn:
    """The data set (`x` float32 [178, 13] in FEATURES order, `y`), its samples file, and
    the classifiers by name."""

    x: np.ndarray
    y: np.ndarray
    samples: Path
    models: dict[str, SklearnModel]

    def row(self, wine_id: str) -> np.ndarray:
        """The features of the sample with id ``wine-NNN`` (NNN: its row in the data set)."""
        return self.x[int(wine_id.rpartition("-")[2])]


def _classifiers() -> dict[str, Any]:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {
        "logistic": make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
        "forest": RandomForestClassifier(n_estimators=20, max_depth=5, random_state=0),
    }


@pytest.fixture(scope="session")
def wine_sklearn(tmp_path_factory: pytest.TempPathFactory) -> WineSklearn:
    """Both classifiers fitted on the wine data, each written as two ONNX files."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_wine

    out = tmp_path_factory.mktemp("wine-sklearn")
    data = load_wine()
    x, y = data.data.astype(np.float32), data.target.astype(np.int64)
    assert len(data.feature_names) == len(FEATURES)
    models = {}
    for name, estimator in _classifiers().items():
        estimator.fit(x, y)
        paths = []
        for options, suffix in ((None, "zipmap"), ({"zipmap": False}, "tensors")):
            path = out / f"wine-{name}-{suffix}.onnx"
            path.write_bytes(to_onnx(estimator, x[:1], options=options).SerializeToString())
            paths.append(path)
        models[name] = SklearnModel(name, estimator, *paths)
    samples = out / "wine-sample.jsonl"
    rows = [
        {
            "id": f"wine-{i:03d}",
            **dict(zip(FEATURES, map(float, x[i]), strict=True)),
            "label": int(y[i]),
        }
        for i in np.random.default_rng(0).permutation(len(y))
    ]
    samples.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return WineSklearn(x=x, y=y, samples=samples, models=models)
