"""The development model server: V1 and V2 answer as the Keras model does, and it restarts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from streamflow import devkit
from streamflow.devkit import DevkitError, ModelServer
from tests.devkit.port_support import first_port_taken
from tests.examples import example_models
from tests.examples.example_models import DigitsModels, ReviewsModel
from tests.model_fixtures import WineModels

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    # trust_env=False: a proxy from the environment must not see requests to 127.0.0.1.
    with httpx.Client(trust_env=False, timeout=30) as http:
        yield http


def predict_v1(client: httpx.Client, server: ModelServer, rows: np.ndarray) -> np.ndarray:
    response = client.post(server.predict_url, json={"instances": rows.tolist()})
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["predictions"], dtype=np.float32)


def infer_v2(client: httpx.Client, server: ModelServer, rows: np.ndarray) -> dict[str, Any]:
    body = {
        "id": "request-1",
        "inputs": [
            {
                "name": "input",
                "shape": list(rows.shape),
                "datatype": "FP32",
                "data": rows.ravel().tolist(),
            }
        ],
    }
    response = client.post(server.infer_url, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def expected(wine_models: WineModels, version: int, rows: np.ndarray) -> np.ndarray:
    return np.asarray(wine_models[version].model.predict(rows, verbose=0))


@pytest.mark.parametrize("batch", [1, 64])
def test_v1_predict_answers_as_the_keras_model_does(
    model_server: ModelServer, wine_models: WineModels, client: httpx.Client, batch: int
) -> None:
    rows = wine_models.x[:batch]
    predictions = predict_v1(client, model_server, rows)
    assert predictions.shape == (batch, 3)
    np.testing.assert_allclose(predictions, expected(wine_models, 1, rows), atol=TOLERANCE)


@pytest.mark.parametrize("batch", [1, 64])
def test_v2_infer_answers_as_the_keras_model_does(
    model_server: ModelServer, wine_models: WineModels, client: httpx.Client, batch: int
) -> None:
    rows = wine_models.x[-batch:]
    result = infer_v2(client, model_server, rows)
    assert (result["model_name"], result["model_version"], result["id"]) == (
        "wine",
        "1",
        "request-1",
    )
    [output] = result["outputs"]
    assert (output["name"], output["shape"], output["datatype"]) == (
        "probabilities",
        [batch, 3],
        "FP32",
    )
    probabilities = np.asarray(output["data"], dtype=np.float32).reshape(batch, 3)
    np.testing.assert_allclose(probabilities, expected(wine_models, 1, rows), atol=TOLERANCE)


def test_health_and_metadata_endpoints_answer(
    model_server: ModelServer, client: httpx.Client
) -> None:
    url = model_server.url
    assert client.get(f"{url}/v2/health/live").json() == {"live": True}
    assert client.get(f"{url}/v2/health/ready").json() == {"ready": True}
    assert client.get(f"{url}/v1/models/wine").json() == {"name": "wine", "ready": True}
    metadata = client.get(f"{url}/v2/models/wine").json()
    assert metadata["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, 13]}]
    assert metadata["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 3]}]
    assert client.get(f"{url}/v2/models/nope/ready").status_code == 404


def test_a_malformed_request_is_a_400_that_says_why(
    model_server: ModelServer, client: httpx.Client
) -> None:
    response = client.post(model_server.predict_url, json={"instances": [[1.0, 2.0]]})
    assert response.status_code == 400
    assert "13 numbers" in response.json()["error"]


def test_a_saved_model_survives_kill_and_restart_on_the_same_url(
    model_server_factory: Callable[..., ModelServer],
    wine_models: WineModels,
    client: httpx.Client,
) -> None:
    server = model_server_factory(model_path=wine_models.v2.saved_model, model_name="wine")
    rows = wine_models.x[::20]
    want = expected(wine_models, 2, rows)
    np.testing.assert_allclose(predict_v1(client, server, rows), want, atol=TOLERANCE)
    url = server.url

    server.kill()
    assert not server.is_running
    with pytest.raises(httpx.TransportError):
        client.get(f"{url}/v2/health/ready")

    server.restart()
    assert server.url == url
    np.testing.assert_allclose(predict_v1(client, server, rows), want, atol=TOLERANCE)


def test_a_port_taken_before_the_server_binds_it_is_picked_again(
    model_server_factory: Callable[..., ModelServer],
    wine_models: WineModels,
    client: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen in CI: a port found free was bound by someone else before the server bound it
    ("address already in use"), and the server exited while starting. A server that
    picked its own ports is started once more, on new ones."""
    with first_port_taken(monkeypatch, "0.0.0.0") as (taken, picked):
        server = model_server_factory(model_path=wine_models.v1.keras_file, model_name="wine")
    assert len(picked) == 2 and picked[0][0] == taken
    assert server.url.endswith(f":{picked[1][0]}")
    rows = wine_models.x[::40]
    np.testing.assert_allclose(
        predict_v1(client, server, rows), expected(wine_models, 1, rows), atol=TOLERANCE
    )
    assert server.work_dir is not None
    assert "address already in use" in (server.work_dir / "server.log").read_text()


def test_a_missing_virtualenv_says_how_to_make_it(tmp_path: Path) -> None:
    server = devkit.ModelServer(model_path=tmp_path, venv=tmp_path / "missing")
    with pytest.raises(DevkitError, match="tools/modelserver/setup"):
        server.start()


def test_a_missing_model_is_named(tmp_path: Path) -> None:
    try:
        devkit.find_modelserver()
    except DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    with pytest.raises(DevkitError, match=r"No model to serve at .*absent\.keras"):
        devkit.ModelServer(model_path=tmp_path / "absent.keras").start()


# -- named, typed tensors: the example models, and one with every V2 datatype --------------

digits_models = example_models.digits_models
reviews_model = example_models.reviews_model


@pytest.fixture(scope="module")
def digits_server(digits_models: DigitsModels) -> Iterator[ModelServer]:
    """The digits CNN's `.keras` file (image FP32 [-1, 8, 8, 1] -> probabilities)."""
    server = ModelServer(
        model_path=digits_models.keras_files[1], model_name="digits", model_version="1"
    )
    try:
        server.start()
    except DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def reviews_server(reviews_model: ReviewsModel) -> Iterator[ModelServer]:
    """The reviews model's `.keras` file (review BYTES [-1] -> sentiment)."""
    server = ModelServer(model_path=reviews_model.keras_file, model_name="reviews")
    try:
        server.start()
    except DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


def typed_saved_model(path: Path) -> Path:
    """A SavedModel taking one input of each V2 datatype, with a number and two text outputs."""
    import tensorflow as tf

    class Typed(tf.Module):
        @tf.function(
            input_signature=[
                tf.TensorSpec([None, 3], tf.float32),
                tf.TensorSpec([None], tf.float64),
                tf.TensorSpec([None], tf.int32),
                tf.TensorSpec([None, 2], tf.int64),
                tf.TensorSpec([None], tf.bool),
                tf.TensorSpec([None], tf.string),
            ]
        )
        def serve(
            self, x32: Any, x64: Any, n32: Any, n64: Any, flag: Any, word: Any
        ) -> dict[str, Any]:
            total = (
                tf.reduce_sum(x32, axis=1)
                + tf.cast(x64, tf.float32)
                + tf.cast(n32, tf.float32)
                + tf.cast(tf.reduce_sum(n64, axis=1), tf.float32)
            )
            return {
                "total": tf.where(flag, total, -total),
                "length": tf.strings.length(word),
                "shout": tf.strings.upper(word),
            }

    module = Typed()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


TYPED_ROWS: list[dict[str, Any]] = [
    {"x32": [1.0, 2.0, 3.0], "x64": 0.5, "n32": 1, "n64": [10, 20], "flag": True, "word": "ab"},
    {"x32": [0.0, 0.0, 1.0], "x64": 1.5, "n32": 2, "n64": [1, 1], "flag": False, "word": "été"},
]
TYPED_EXPECTED = [
    {"total": 37.5, "length": 2, "shout": "AB"},
    {"total": -6.5, "length": 5, "shout": "éTé"},  # bytes, not letters; ASCII upper-casing
]


@pytest.fixture(scope="module")
def typed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    path = typed_saved_model(tmp_path_factory.mktemp("typed") / "typed")
    server = ModelServer(model_path=path, model_name="typed")
    try:
        server.start()
    except DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


def test_v2_infer_takes_an_image_tensor_and_answers_as_the_cnn_does(
    digits_server: ModelServer, digits_models: DigitsModels, client: httpx.Client
) -> None:
    images = digits_models.x[:5]
    body = {
        "inputs": [
            {
                "name": "image",
                "shape": [5, 8, 8, 1],
                "datatype": "FP32",
                "data": images.ravel().tolist(),
            }
        ]
    }
    response = client.post(digits_server.infer_url, json=body)
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    assert (output["name"], output["shape"], output["datatype"]) == (
        "probabilities",
        [5, 10],
        "FP32",
    )
    got = np.asarray(output["data"], dtype=np.float32).reshape(5, 10)
    want = digits_models.models[1].predict(images, verbose=0)
    np.testing.assert_allclose(got, want, atol=TOLERANCE)


def test_v1_predict_takes_images_as_rows_as_named_objects_and_as_columns(
    digits_server: ModelServer, digits_models: DigitsModels, client: httpx.Client
) -> None:
    images = digits_models.x[10:13]
    want = digits_models.models[1].predict(images, verbose=0)
    for body in (
        {"instances": images.tolist()},
        {"instances": [{"image": image} for image in images.tolist()]},
        {"inputs": {"image": images.tolist()}},
    ):
        response = client.post(digits_server.predict_url, json=body)
        assert response.status_code == 200, response.text
        got = np.asarray(response.json()["predictions"], dtype=np.float32)
        np.testing.assert_allclose(got, want, atol=TOLERANCE)


def test_v2_infer_takes_raw_text_as_bytes(
    reviews_server: ModelServer, reviews_model: ReviewsModel, client: httpx.Client
) -> None:
    texts = [str(t) for t in reviews_model.x[:4]]
    body = {"inputs": [{"name": "review", "shape": [4], "datatype": "BYTES", "data": texts}]}
    response = client.post(reviews_server.infer_url, json=body)
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    assert (output["name"], output["shape"]) == ("sentiment", [4, 2])
    got = np.asarray(output["data"], dtype=np.float32).reshape(4, 2)
    want = reviews_model.model.predict(np.array(texts, dtype=object), verbose=0)
    np.testing.assert_allclose(got, want, atol=TOLERANCE)
    v1 = client.post(reviews_server.predict_url, json={"instances": texts})
    assert v1.status_code == 200, v1.text
    np.testing.assert_allclose(v1.json()["predictions"], want, atol=TOLERANCE)


def test_metadata_reports_the_real_tensor_names_datatypes_and_shapes(
    digits_server: ModelServer,
    reviews_server: ModelServer,
    typed_server: ModelServer,
    client: httpx.Client,
) -> None:
    def metadata(server: ModelServer) -> dict[str, Any]:
        response = client.get(f"{server.url}/v2/models/{server.model_name}")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    digits = metadata(digits_server)
    assert digits["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 8, 8, 1]}]
    assert digits["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}]
    reviews = metadata(reviews_server)
    assert reviews["inputs"] == [{"name": "review", "datatype": "BYTES", "shape": [-1]}]
    assert reviews["outputs"] == [{"name": "sentiment", "datatype": "FP32", "shape": [-1, 2]}]
    typed = metadata(typed_server)
    assert {(t["name"], t["datatype"], tuple(t["shape"])) for t in typed["inputs"]} == {
        ("x32", "FP32", (-1, 3)),
        ("x64", "FP64", (-1,)),
        ("n32", "INT32", (-1,)),
        ("n64", "INT64", (-1, 2)),
        ("flag", "BOOL", (-1,)),
        ("word", "BYTES", (-1,)),
    }
    assert {(t["name"], t["datatype"]) for t in typed["outputs"]} == {
        ("total", "FP32"),
        ("length", "INT32"),
        ("shout", "BYTES"),
    }


def _typed_v2_inputs() -> list[dict[str, Any]]:
    datatypes = {"x32": "FP32", "x64": "FP64", "n32": "INT32", "n64": "INT64", "flag": "BOOL"}
    datatypes["word"] = "BYTES"
    out = []
    for name, datatype in datatypes.items():
        column = np.asarray([row[name] for row in TYPED_ROWS], dtype=object)
        out.append(
            {
                "name": name,
                "shape": list(column.shape) if column.ndim > 1 else [len(TYPED_ROWS)],
                "datatype": datatype,
                "data": np.asarray(column.tolist()).ravel().tolist(),
            }
        )
    return out


def test_v2_infer_feeds_every_datatype_and_returns_every_or_the_requested_outputs(
    typed_server: ModelServer, client: httpx.Client
) -> None:
    response = client.post(typed_server.infer_url, json={"inputs": _typed_v2_inputs()})
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    assert set(outputs) == {"total", "length", "shout"}
    assert outputs["total"]["data"] == pytest.approx([r["total"] for r in TYPED_EXPECTED])
    assert outputs["length"]["data"] == [r["length"] for r in TYPED_EXPECTED]
    assert (outputs["shout"]["datatype"], outputs["shout"]["data"]) == (
        "BYTES",
        [r["shout"] for r in TYPED_EXPECTED],
    )
    only = client.post(
        typed_server.infer_url,
        json={"inputs": _typed_v2_inputs(), "outputs": [{"name": "length"}]},
    )
    assert only.status_code == 200, only.text
    assert [o["name"] for o in only.json()["outputs"]] == ["length"]


def test_v1_predict_takes_objects_or_columns_and_answers_objects_for_several_outputs(
    typed_server: ModelServer, client: httpx.Client
) -> None:
    columns = {name: [row[name] for row in TYPED_ROWS] for name in TYPED_ROWS[0]}
    for body in ({"instances": TYPED_ROWS}, {"inputs": columns}):
        response = client.post(typed_server.predict_url, json=body)
        assert response.status_code == 200, response.text
        got = response.json()["predictions"]
        assert [{**g, "total": pytest.approx(g["total"])} for g in got] == TYPED_EXPECTED


def test_a_request_that_does_not_fit_the_tensors_is_a_400_that_names_them(
    typed_server: ModelServer, digits_server: ModelServer, client: httpx.Client
) -> None:
    inputs = _typed_v2_inputs()
    missing = client.post(typed_server.infer_url, json={"inputs": inputs[:-1]})
    assert missing.status_code == 400 and "word" in missing.json()["error"]
    wrong = [
        dict(i, datatype="FP32", data=[1.0, 2.0]) if i["name"] == "word" else i for i in inputs
    ]
    mistyped = client.post(typed_server.infer_url, json={"inputs": wrong})
    assert mistyped.status_code == 400 and "BYTES" in mistyped.json()["error"]
    rows = client.post(typed_server.predict_url, json={"instances": [[1.0, 2.0, 3.0]]})
    assert rows.status_code == 400 and "keyed by input name" in rows.json()["error"]
    unknown = client.post(
        digits_server.infer_url,
        json={
            "inputs": [
                {"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0.0] * 64}
            ],
            "outputs": [{"name": "logits"}],
        },
    )
    assert unknown.status_code == 400 and "probabilities" in unknown.json()["error"]
    seven_rows = [[[0.0]] * 8] * 7
    shape = client.post(digits_server.predict_url, json={"instances": [seven_rows]})
    assert shape.status_code == 400 and "[-1, 8, 8, 1]" in shape.json()["error"]
