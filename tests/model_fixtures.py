"""Model fixtures: the wine classifier, trained once per test run, and a real model server.

`wine_models` trains both versions of blueprints/wine/train.py once per test run
(`tests.built_once`: the first xdist worker to ask trains, the others load what it
wrote) and exports each as a `.keras` file, a SavedModel and an ONNX graph of the
same weights. A test that needs *a* wine model in a replica,
not Keras itself, serves the ONNX one: a replica that loads it never imports
TensorFlow, which costs about 5 CPU seconds a replica on a machine the suite keeps busy.
`model_server` serves version 1's `.keras` file as model "wine" with KServe's
ModelServer (tools/modelserver/.venv, from `tools/modelserver/setup`), shared by
the session: a test that kills, pauses or restarts a server takes its own from
`model_server_factory` instead, so it never disturbs the others.

The trainer needs TensorFlow and scikit-learn in the test environment; without
them these fixtures fail, saying what to install.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from streamflow import devkit
from tests.built_once import built_once

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = ROOT / "blueprints" / "wine" / "train.py"
_MODULE_NAME = "streamflow_blueprints_wine_train"


def load_wine_trainer() -> ModuleType:
    """blueprints/wine/train.py as a module (blueprints/ is not a package), loaded once."""
    if (module := sys.modules.get(_MODULE_NAME)) is not None:
        return module
    for needed in ("keras", "sklearn"):
        if importlib.util.find_spec(needed) is None:
            pytest.fail(
                f"{needed} is missing: the wine model needs the tf and examples extras "
                "(./dev setup installs them)",
                pytrace=False,
            )
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, TRAIN_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class WineModel:
    """One trained version: its artifacts on disk and the Keras model they were saved from."""

    version: int
    keras_file: Path
    saved_model: Path
    onnx_file: Path  # the same weights as an ONNX graph: serving it needs no TensorFlow
    model: Any  # keras.Model; Any so this module imports without TensorFlow


@dataclass(frozen=True)
class WineModels:
    """Both versions, the data set's features as float32 `x` [178, 13], and its labels `y`."""

    dir: Path
    versions: dict[int, WineModel]
    samples: Path
    x: Any
    y: Any

    def __getitem__(self, version: int) -> WineModel:
        return self.versions[version]

    @property
    def v1(self) -> WineModel:
        return self.versions[1]

    @property
    def v2(self) -> WineModel:
        return self.versions[2]


@pytest.fixture(scope="session")
def wine_models(tmp_path_factory: pytest.TempPathFactory) -> WineModels:
    """Versions 1 and 2 of the wine classifier, trained and exported once per test run."""
    train = load_wine_trainer()

    def build(out: Path) -> dict[str, Any]:
        frame = train.load_wine_frame()
        versions = {}
        for version in train.VERSIONS:
            model = train.train_model(version)
            keras_file, saved_model = train.export(model, out=out, version=version)
            onnx_file = wine_onnx(model, out / f"wine-v{version}.onnx")
            _same_answers(model, onnx_file, frame.x)
            versions[version] = [keras_file.name, saved_model.name, onnx_file.name]
        return {
            "versions": versions,
            "samples": train.write_samples(out / "wine-sample.jsonl").name,
        }

    out, built = built_once(tmp_path_factory, "wine-models", build)
    import keras

    versions: dict[int, WineModel] = {}
    for version, (keras_name, saved_name, onnx_name) in built["versions"].items():
        keras_file = out / keras_name
        model = keras.models.load_model(keras_file)
        versions[int(version)] = WineModel(
            int(version), keras_file, out / saved_name, out / onnx_name, model
        )
    frame = train.load_wine_frame()
    return WineModels(
        dir=out, versions=versions, samples=out / built["samples"], x=frame.x, y=frame.y
    )


def wine_onnx(model: Any, path: Path) -> Path:
    """The wine classifier's layers as an ONNX graph with the Keras model's input and output
    names: standardise (x - mean) / sqrt(variance), then Gemm and an activation per Dense
    layer. Written to ``path``; checked against the Keras model on the data set."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    weights: list[Any] = []
    current = ""
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "InputLayer":
            current = layer.name
        elif kind == "Normalization":
            mean, variance = (
                np.asarray(v, dtype=np.float32).reshape(-1) for v in layer.get_weights()[:2]
            )
            scale = np.maximum(np.sqrt(variance), np.float32(1e-7)).astype(np.float32)
            weights += [numpy_helper.from_array(mean, "mean")]
            weights += [numpy_helper.from_array(scale, "scale")]
            nodes += [
                helper.make_node("Sub", [current, "mean"], ["centred"]),
                helper.make_node("Div", ["centred", "scale"], ["standardised"]),
            ]
            current = "standardised"
        elif kind == "Dense":
            kernel, bias = layer.get_weights()
            weights += [
                numpy_helper.from_array(kernel.astype(np.float32), f"{layer.name}_w"),
                numpy_helper.from_array(bias.astype(np.float32), f"{layer.name}_b"),
            ]
            activation = layer.activation.__name__
            dense = f"{layer.name}_gemm" if activation != "linear" else layer.name
            nodes.append(
                helper.make_node("Gemm", [current, f"{layer.name}_w", f"{layer.name}_b"], [dense])
            )
            if activation in ("relu", "softmax"):
                op = {"relu": "Relu", "softmax": "Softmax"}[activation]
                nodes.append(helper.make_node(op, [dense], [layer.name]))
            elif activation != "linear":
                raise ValueError(f"{layer.name}: no ONNX translation of {activation!r}")
            current = layer.name
        else:
            raise ValueError(f"{layer.name}: no ONNX translation of a {kind} layer")
    features = int(model.inputs[0].shape[-1])
    classes = int(model.outputs[0].shape[-1])
    graph = helper.make_graph(
        nodes,
        model.name,
        [helper.make_tensor_value_info(model.layers[0].name, TensorProto.FLOAT, [None, features])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [None, classes])],
        initializer=weights,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8  # what onnxruntime reads
    onnx.checker.check_model(proto, full_check=True)
    path.write_bytes(proto.SerializeToString())
    return path


def _same_answers(model: Any, onnx_file: Path, x: Any) -> None:
    """The ONNX graph answers as the Keras model does, on every wine, within float noise."""
    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    [graph] = session.run(None, {session.get_inputs()[0].name: x.astype(np.float32)})
    expected = np.asarray(model.predict(x, verbose=0))
    difference = float(np.max(np.abs(graph - expected)))
    assert difference < 1e-4, f"{onnx_file.name} differs from its Keras model by {difference}"


def _started(server: devkit.ModelServer) -> devkit.ModelServer:
    try:
        server.start()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    return server


@pytest.fixture(scope="session")
def model_server(wine_models: WineModels) -> Iterator[devkit.ModelServer]:
    """KServe's ModelServer serving version 1's `.keras` file as "wine"; shared, do not kill."""
    server = devkit.ModelServer(
        model_path=wine_models.v1.keras_file, model_name="wine", model_version="1"
    )
    yield _started(server)
    server.stop()


@pytest.fixture
def model_server_factory() -> Iterator[Callable[..., devkit.ModelServer]]:
    """`model_server_factory(model_path=..., ...)` starts a server of the test's own.

    It takes ModelServer's keyword arguments; every server it started is stopped after the test.
    """
    started: list[devkit.ModelServer] = []

    def start(**options: Any) -> devkit.ModelServer:
        server = devkit.ModelServer(**options)
        started.append(server)
        return _started(server)

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def shared_model_server() -> Iterator[Callable[..., devkit.ModelServer]]:
    """`shared_model_server(model_path=..., ...)`: one server per set of arguments, shared by a
    module's tests and stopped after its last one.

    For tests that only ask a server for metadata and predictions, which change nothing
    in it: each start imports TensorFlow and KServe again (about 6 CPU seconds on a 2-core
    machine). A test that kills, restarts or breaks its server uses `model_server_factory`.
    """
    started: dict[tuple[tuple[str, str], ...], devkit.ModelServer] = {}

    def get(**options: Any) -> devkit.ModelServer:
        key = tuple(sorted((name, str(value)) for name, value in options.items()))
        if key not in started:
            started[key] = _started(devkit.ModelServer(**options))
        return started[key]

    yield get
    for server in started.values():
        server.stop()


@pytest.fixture
def hosted_models() -> Callable[..., contextlib.AbstractContextManager[Any]]:
    """`hosted_models(tmp_path, reference=..., weights=..., baseline=...)` starts a KServe
    server hosting a drift detector and an explainer (`tests.streamlets.drift.hosted`).

    A fixture rather than a plain import, so that asking for it puts the test in the
    integration tier (`tests/tiers.py`): it starts a real model server.
    """
    from tests.streamlets.drift import hosted

    return hosted.hosted
