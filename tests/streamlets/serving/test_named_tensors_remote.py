"""Named, typed tensors over the wire, against KServe's real ModelServer.

The same models as the embedded tests, served remotely: several named inputs
over V1 (instances as objects, or columnar) and V2 (JSON, and the binary
tensor extension), raw text as V2 BYTES, and a server whose metadata does not
fit the mapping (the old model keeps serving).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamflow import devkit
from tests.streamlets.serving import serving_support as s
from tests.streamlets.serving import tensor_apps as apps
from tests.streamlets.serving import tensor_models as models
from tests.streamlets.serving.test_named_tensors import (
    ROWS,
    _check_mixed,
    _harness,
    _mixed_expected,
    _outputs,
    _values,
)

REMOTE = {"allowlist": ["http://127.0.0.1:"]}


@pytest.fixture(scope="module")
def remote_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("remote-tensor-models")
    return {
        "dir": where,
        "mixed": models.mixed_keras(where / "mixed.keras"),
        "text": models.text_keras(where / "text.keras"),
    }


def _remote(h: Any, version: int, server: devkit.ModelServer, kind: str, **params: str) -> Any:
    h.control(
        "model",
        s.descriptor(
            version,
            kind,
            location=server.url,
            sha256=None,
            parameters={"model": server.model_name, **params},
            name="m",
        ),
    )
    return s.settle(h, version)


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("OPEN_INFERENCE_V2", {}),
        ("OPEN_INFERENCE_V2", {"binary": "true"}),
        ("TF_SERVING", {}),
        ("TF_SERVING", {"v1_format": "columnar"}),
    ],
    ids=["v2-json", "v2-binary", "v1-instances", "v1-columnar"],
)
def test_several_named_inputs_and_outputs_over_each_protocol(
    remote_models: dict[str, Any],
    shared_model_server: Callable[..., devkit.ModelServer],
    tmp_path: Path,
    kind: str,
    params: dict[str, str],
) -> None:
    server = shared_model_server(
        model_path=remote_models["dir"] / "mixed.keras", model_name="mixed"
    )
    h = _harness(apps.MixedServing, {**apps.MIXED_CONFIG, **REMOTE}, tmp_path)
    status = _remote(h, 1, server, kind, **params)
    assert status["state"] == "serving", status["message"]
    values = _values()
    _check_mixed(_outputs(h, values), *_mixed_expected(remote_models["mixed"], values))


def test_raw_text_travels_as_v2_bytes(
    remote_models: dict[str, Any],
    shared_model_server: Callable[..., devkit.ModelServer],
    tmp_path: Path,
) -> None:
    server = shared_model_server(model_path=remote_models["dir"] / "text.keras", model_name="t")
    h = _harness(apps.TextServing, {**apps.TEXT_CONFIG, **REMOTE}, tmp_path)
    assert _remote(h, 1, server, "OPEN_INFERENCE_V2")["state"] == "serving"
    values = _values()
    got = _outputs(h, values)
    expected = np.asarray(remote_models["text"](np.array([v["text"] for v in values])))
    assert [g["sentiment"] for g in got] == [["neg", "pos"][i] for i in expected.argmax(axis=1)]


def test_a_server_whose_metadata_does_not_fit_fails_and_the_old_model_serves(
    remote_models: dict[str, Any],
    shared_model_server: Callable[..., devkit.ModelServer],
    tmp_path: Path,
) -> None:
    server = shared_model_server(
        model_path=remote_models["dir"] / "mixed.keras", model_name="mixed"
    )
    h = _harness(apps.TextServing, {**apps.TEXT_CONFIG, **REMOTE}, tmp_path)
    h.control(
        "model",
        s.descriptor(1, "KERAS", data=(remote_models["dir"] / "text.keras").read_bytes(), name="m"),
    )
    assert s.settle(h, 1)["state"] == "serving"
    status = _remote(h, 2, server, "OPEN_INFERENCE_V2")
    assert status["state"] == "failed"
    assert "the model has no input 'text'" in status["message"], status["message"]
    assert "features" in status["message"] and "still serving m:1" in status["message"]
    got = _outputs(h, _values())
    assert len(got) == ROWS and all(g["model_version"] == 1 for g in got)
