"""The protocols' bodies for named tensors: what goes on the wire, and what comes back."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from streamflow.models import tensors, wire


def test_v2_binary_requests_carry_raw_little_endian_tensors_after_a_json_header() -> None:
    image = np.arange(2 * 4, dtype=np.float32).reshape(2, 2, 2)
    text = np.array(["héllo", "x"], dtype=object)
    body, headers = wire.encode_request(wire.V2, {"image": image, "text": text}, binary=True)
    size = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:size])
    shapes = {t["name"]: (t["shape"], t["datatype"]) for t in header["inputs"]}
    assert shapes == {"image": ([2, 2, 2], "FP32"), "text": ([2], "BYTES")}
    blob = body[size:]
    assert blob[:32] == image.astype("<f4").tobytes()
    assert blob[32:] == struct.pack("<I", 6) + "héllo".encode() + struct.pack("<I", 1) + b"x"


def test_v2_binary_responses_are_decoded_by_name() -> None:
    scores = np.array([[0.25, 0.75]], dtype=np.float32)
    head = json.dumps(
        {
            "outputs": [
                {
                    "name": "scores",
                    "shape": [1, 2],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 8},
                },
                {
                    "name": "label",
                    "shape": [1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": 7},
                },
            ]
        }
    ).encode()
    content = head + scores.tobytes() + struct.pack("<I", 3) + b"pos"
    out = wire.decode_response(
        wire.V2, content, {"Inference-Header-Content-Length": str(len(head))}, rows=1, url="u"
    )
    np.testing.assert_array_equal(out["scores"], scores)
    assert out["label"].tolist() == [b"pos"]


def test_v1_sends_rows_for_one_unnamed_input_and_objects_for_named_ones() -> None:
    rows = np.array([[1.0, 2.0]], dtype=np.float32)
    body, _ = wire.encode_request(wire.V1, {tensors.ONLY: rows})
    assert json.loads(body) == {"instances": [[1.0, 2.0]]}
    named = {"x": rows, "t": np.array(["a"], dtype=object)}
    body, _ = wire.encode_request(wire.V1, named)
    assert json.loads(body) == {"instances": [{"x": [1.0, 2.0], "t": "a"}]}
    body, _ = wire.encode_request(wire.V1, named, columnar=True)
    assert json.loads(body) == {"inputs": {"x": [[1.0, 2.0]], "t": ["a"]}}


def test_a_response_without_the_protocols_shape_is_a_clear_error() -> None:
    with pytest.raises(wire.WireError, match="unexpected response from http://m"):
        wire.decode_response(wire.V2, b'{"answer": 42}', {}, rows=1, url="http://m")


def test_a_model_name_stays_one_path_segment_under_the_allowed_location() -> None:
    from streamflow.models import remote

    infer, ready = remote.endpoints(wire.V2, "http://ms:8080/tenants/a", "x/../../admin?q#f")
    assert infer == "http://ms:8080/tenants/a/v2/models/x%2F..%2F..%2Fadmin%3Fq%23f/infer"
    assert ready.startswith("http://ms:8080/tenants/a/v2/models/x%2F")
    with pytest.raises(remote.PermanentError, match="not a model name"):
        remote.endpoints(wire.V1, "http://ms:8080/tenants/a", "..")
