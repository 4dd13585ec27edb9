"""The serving streamlet's logic, in memory: loading, switching, rejecting, failing."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamflow.models.artifacts import allowed, pack_directory
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s


def _rows(models: WineModels, n: int = 20) -> list[dict[str, Any]]:
    return [
        {
            "id": f"w{i}",
            **{f: float(models.x[i][j]) for j, f in enumerate(s.FEATURES)},
            "label": int(models.y[i]),
        }
        for i in range(n)
    ]


def _statuses(outputs: list[Any]) -> list[tuple[int, str]]:
    return [(o.value["version"], o.value["state"]) for o in outputs if o.outlet == "status"]


def test_data_waits_for_the_first_model_then_predictions_match_the_model(
    wine_models: WineModels, tmp_path: Path
) -> None:
    h = s.harness(tmp_path)
    h.feed("in", _rows(wine_models), keys=[f"k{i}" for i in range(20)])
    assert h.run() == [] and h.pending == 20  # held: no model yet
    keras = wine_models.v1.keras_file.read_bytes()
    loading = h.control("model", s.descriptor(1, "KERAS", data=keras))
    assert _statuses(loading) == [(1, "loading")]
    assert s.settle(h, 1)["state"] == "serving"
    outputs = [o for o in h.run() if o.outlet == "out"]
    assert len(outputs) == 20 and h.pending == 0
    expected = wine_models.v1.model.predict(wine_models.x[:20], verbose=0)
    got = np.array([o.value["probabilities"] for o in outputs])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert all(o.headers["streamflow-model"] == "wine:1" for o in outputs)
    assert all(o.value["model_version"] == 1 and o.value["label"] is not None for o in outputs)
    assert [o.key for o in outputs] == [f"k{i}" for i in range(20)]


def test_saved_model_archives_load_and_switch_between_batches(
    wine_models: WineModels, tmp_path: Path
) -> None:
    h = s.harness(tmp_path, allow_saved_model=True)
    h.control("model", s.descriptor(1, "KERAS", data=wine_models.v1.keras_file.read_bytes()))
    s.settle(h, 1)
    archive = pack_directory(wine_models.v2.saved_model)
    h.control("model", s.descriptor(2, "TF_SAVED_MODEL", data=archive))
    h.feed("in", _rows(wine_models, 5))
    first = [o for o in h.run() if o.outlet == "out"]
    assert {o.value["model_version"] for o in first} <= {1, 2}  # one model per batch
    assert len({o.value["model_version"] for o in first}) == 1
    if first[0].value["model_version"] == 1:  # the swap had not happened yet
        s.settle(h, 2)
    h.feed("in", _rows(wine_models, 5))
    second = [o for o in h.run() if o.outlet == "out"]
    assert {o.value["model_version"] for o in second} == {2}
    expected = wine_models.v2.model.predict(wine_models.x[:5], verbose=0)
    np.testing.assert_allclose([o.value["probabilities"] for o in second], expected, atol=1e-5)


def _corrupt_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("saved_model.pb")
        payload = b"this is not a protobuf"
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("case", "state", "reason"),
    [
        ("corrupt-archive", "failed", "SavedModel"),
        ("wrong-sha256", "failed", "sha256 mismatch"),
        ("wrong-signature", "failed", "no signature 'nope'"),
        ("outside-allowlist", "rejected", "not in the allowlist"),
        ("saved-model-not-allowed", "rejected", "allow_saved_model"),
        ("unreachable-server", "failed", "unreachable"),
        ("not-newer", "rejected", "not newer"),
        ("garbage-keras", "failed", "Keras"),
    ],
)
def test_a_bad_descriptor_leaves_the_old_model_serving(
    wine_models: WineModels, tmp_path: Path, case: str, state: str, reason: str
) -> None:
    h = s.harness(tmp_path, allow_saved_model=case != "saved-model-not-allowed")
    h.control("model", s.descriptor(1, "KERAS", data=wine_models.v1.keras_file.read_bytes()))
    s.settle(h, 1)
    archive = pack_directory(wine_models.v2.saved_model)
    bad = {
        "corrupt-archive": s.descriptor(2, "TF_SAVED_MODEL", data=_corrupt_archive()),
        "wrong-sha256": s.descriptor(2, "TF_SAVED_MODEL", data=archive, sha256="0" * 64),
        "wrong-signature": s.descriptor(
            2, "TF_SAVED_MODEL", data=archive, parameters={"signature": "nope"}
        ),
        "outside-allowlist": s.descriptor(2, "OPEN_INFERENCE_V2", location="http://10.1.2.3:80"),
        "saved-model-not-allowed": s.descriptor(2, "TF_SAVED_MODEL", data=archive),
        "unreachable-server": s.descriptor(2, "OPEN_INFERENCE_V2", location="http://127.0.0.1:9"),
        "not-newer": s.descriptor(1, "KERAS", data=wine_models.v2.keras_file.read_bytes()),
        "garbage-keras": s.descriptor(2, "KERAS", data=b"PK\x03\x04 not really a zip"),
    }[case]
    immediate = h.control("model", bad)
    final = next((st for st in (o.value for o in immediate) if st["state"] != "loading"), None)
    status = final or s.settle(h, bad["version"])
    assert status["state"] == state
    assert reason in status["message"], status["message"]
    h.feed("in", _rows(wine_models, 10))
    outputs = [o for o in h.run() if o.outlet == "out"]
    assert len(outputs) == 10 and not h.dead_letters  # nothing lost
    assert {o.value["model_version"] for o in outputs} == {1}


def test_on_no_model_dlq_dead_letters_instead_of_waiting(
    wine_models: WineModels, tmp_path: Path
) -> None:
    h = s.harness(tmp_path, on_no_model="dlq")
    h.feed("in", _rows(wine_models, 3))
    assert [o for o in h.run() if o.outlet == "out"] == []
    assert len(h.dead_letters) == 3
    assert "no model" in str(h.dead_letters[0].error)


def test_allowlist_normalises_paths() -> None:
    assert allowed("file:///models/wine.keras", ["file:///models/"])
    assert not allowed("file:///models/../etc/passwd", ["file:///models/"])
    assert not allowed("http://evil.example/x", ["http://127.0.0.1:"])
    assert not allowed("ftp://127.0.0.1/x", ["ftp://"])
    assert allowed("http://127.0.0.1:8080/", ["http://127.0.0.1:"])
