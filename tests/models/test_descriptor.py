"""The typed model descriptor: the same record whichever way it is made, and its kind checked."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from streamflow.models.descriptor import ModelDescriptor, build_descriptor
from streamflow.models.kinds import ModelKind
from streamflow.schema import SchemaStore
from streamflow.schema.codecs import SingleObjectCodec

DESCRIPTOR = "streamflow.ml.ModelDescriptor"


def test_a_built_descriptor_survives_the_control_topics_codec(tmp_path: Path) -> None:
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"not really onnx, but bytes to digest")
    built = build_descriptor("m", 3, artifact=("onnx", onnx), parameters={"threads": "2"})
    store = SchemaStore()
    codec = SingleObjectCodec(store.get(DESCRIPTOR), store=store)
    back = ModelDescriptor.from_record(codec.decode(codec.encode(built.to_record())))
    assert back.kind is ModelKind.ONNX
    assert (back.name, back.version, back.data, back.sha256) == (
        "m",
        3,
        onnx.read_bytes(),
        built.sha256,
    )
    assert dict(back.parameters) == {"threads": "2"}
    assert back.inline and not back.remote
    assert back.tag == "m:3"


def test_a_model_servers_descriptor_is_remote_and_says_where() -> None:
    built = build_descriptor("m", 1, url="http://127.0.0.1:8080", protocol="v1")
    assert built.kind is ModelKind.TF_SERVING
    assert built.remote and not built.inline
    assert built.summary() == "TF_SERVING (http://127.0.0.1:8080)"


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="PICKLE"):
        ModelDescriptor.from_record({"name": "m", "version": 1, "kind": "PICKLE"})


def test_milliseconds_since_the_epoch_read_as_a_time() -> None:
    record = {"name": "m", "version": 1, "kind": "ONNX", "created_at": 1_000}
    created = ModelDescriptor.from_record(record).created_at
    assert created == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)


def test_its_parameters_cannot_be_changed_behind_its_back() -> None:
    given = {"threads": "1"}
    descriptor = ModelDescriptor("m", 1, ModelKind.ONNX, parameters=given)
    given["threads"] = "64"
    assert descriptor.parameters["threads"] == "1"
    with pytest.raises(TypeError):
        descriptor.parameters["threads"] = "64"  # type: ignore[index]
