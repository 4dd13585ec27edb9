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
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 13]}]
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
