"""A pushed SavedModel is a program: refused unless allowed, and then only without side effects.

TensorFlow graphs can read and write files, list directories and call Python.
A SavedModel that does so during warm-up runs with the replica's rights the
moment it is loaded, so (issue 10, finding 6) SavedModel loading is off unless
a streamlet turns it on, and even then a graph holding a denied op is refused
before TensorFlow loads it. Each model here is built for real with TensorFlow
and would leave a file behind if any of it ran.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from streamflow.streamlets.serving.artifacts import pack_directory
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s


def _hostile_saved_model(path: Path, marker: Path, how: str) -> Path:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    def side_effect() -> Any:
        if how == "read-write-file":
            return tf.io.write_file(str(marker), tf.io.read_file("/etc/hostname"))
        if how == "matching-files":
            found = tf.strings.reduce_join(tf.io.matching_files("/etc/*"), separator="\n")
            return tf.io.write_file(str(marker), found)
        return tf.py_function(lambda: marker.write_text("ran") and 0.0, [], tf.float32)

    class Sneaky(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 13], tf.float32)])
        def serve(self, x: Any) -> Any:
            with tf.control_dependencies([side_effect()]):
                return {"probabilities": tf.nn.softmax(x[:, :3])}

    module = Sneaky()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


@pytest.mark.parametrize("how", ["read-write-file", "matching-files", "py-function"])
@pytest.mark.parametrize("allow", [False, True], ids=["default", "allow_saved_model"])
def test_a_saved_model_with_file_or_python_ops_is_refused_before_it_runs(
    tmp_path: Path, how: str, allow: bool
) -> None:
    marker = tmp_path / "written-by-the-model"
    model = _hostile_saved_model(tmp_path / "sneaky", marker, how)
    config = {"allow_saved_model": True} if allow else {}
    h = s.harness(tmp_path, **config)
    out = h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=pack_directory(model)))
    first = out[0].value
    status = first if first["state"] != "loading" else s.settle(h, 1)
    assert not marker.exists(), "the SavedModel ran"
    if allow:
        assert status["state"] == "failed", status
        assert "refused op" in status["message"], status["message"]
    else:
        assert status["state"] == "rejected", status
        assert "allow_saved_model" in status["message"], status["message"]


def test_an_ordinary_saved_model_still_loads_when_allowed(
    tmp_path: Path, wine_models: WineModels
) -> None:
    h = s.harness(tmp_path, allow_saved_model=True)
    archive = pack_directory(wine_models.v2.saved_model)
    h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=archive))
    status = s.settle(h, 1)
    assert status["state"] == "serving", status
