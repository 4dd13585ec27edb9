"""Request and response bodies of the two model-server protocols, for named tensors.

TF Serving / KServe V1 (``:predict``): a model with one unnamed input takes
``instances`` as rows; named inputs go as one object per instance (the row
form) or as ``inputs: {name: batch}`` (the columnar form). ``predictions``
come back as rows (one output) or objects keyed by output name.

Open Inference Protocol V2 (``/infer``): every tensor has a name, a shape and a
datatype. With ``binary`` the tensors travel as raw little-endian bytes after a
JSON header (the binary tensor extension: ``Inference-Header-Content-Length``),
which for images is several times smaller and faster than JSON numbers.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from streamflow.models import tensors
from streamflow.models.kinds import ModelKind

__all__ = ["FROM_V2", "TO_V2", "V1", "V2", "WireError", "decode_response", "encode_request"]

V1 = ModelKind.TF_SERVING
V2 = ModelKind.OPEN_INFERENCE_V2

#: Open Inference Protocol datatypes to the mapping's dtypes, and back.
FROM_V2 = {
    "FP32": "float32",
    "FP64": "float64",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "BYTES": "bytes",
}
TO_V2 = {v: k for k, v in FROM_V2.items()} | {"string": "BYTES"}
_NUMPY: dict[str, Any] = {
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}
_HEADER = "Inference-Header-Content-Length"
_JSON = {"Content-Type": "application/json"}


class WireError(ValueError):
    """A response that does not have the protocol's shape."""


def _datatype(array: np.ndarray) -> str:
    if array.dtype == object:
        return "BYTES"
    for name, dtype in _NUMPY.items():
        if array.dtype == np.dtype(dtype):
            return name
    raise WireError(f"no V2 datatype for numpy {array.dtype}")


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def encode_request(
    protocol: str,
    inputs: Mapping[str, np.ndarray],
    *,
    default_name: str = "input",
    binary: bool = False,
    columnar: bool = False,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one request for a batch of named inputs."""
    if protocol == V1:
        return json.dumps(_v1(inputs, columnar=columnar)).encode(), _JSON
    named = {(name or default_name): array for name, array in inputs.items()}
    # JSON carries text, not arbitrary bytes: those always travel as binary tensors
    if not binary and not any(_raw_bytes(array) for array in named.values()):
        body = {
            "inputs": [
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": _datatype(array),
                    "data": [_text(x) for x in array.reshape(-1).tolist()]
                    if array.dtype == object
                    else array.reshape(-1).tolist(),
                }
                for name, array in named.items()
            ]
        }
        return json.dumps(body).encode(), _JSON
    blobs = [_binary(array) for array in named.values()]
    header = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": _datatype(array),
                "parameters": {"binary_data_size": len(blob)},
            }
            for (name, array), blob in zip(named.items(), blobs, strict=True)
        ],
        "parameters": {"binary_data_output": True},
    }
    head = json.dumps(header).encode()
    headers = {"Content-Type": "application/octet-stream", _HEADER: str(len(head))}
    return head + b"".join(blobs), headers


def _v1(inputs: Mapping[str, np.ndarray], *, columnar: bool) -> dict[str, Any]:
    if list(inputs) == [tensors.ONLY]:
        return {"instances": _plain(inputs[tensors.ONLY])}
    if columnar:
        return {"inputs": {name: _plain(array) for name, array in inputs.items()}}
    columns = {name: _plain(array) for name, array in inputs.items()}
    rows = len(next(iter(columns.values())))
    return {"instances": [{name: col[i] for name, col in columns.items()} for i in range(rows)]}


def _plain(array: np.ndarray) -> list[Any]:
    if array.dtype == object:
        return [_plain_item(x) for x in array.tolist()]
    return array.tolist()  # type: ignore[no-any-return]


def _plain_item(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain_item(x) for x in value]
    if isinstance(value, bytes):  # TF Serving's form for binary values in JSON
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    return str(value)


def _raw_bytes(array: np.ndarray) -> bool:
    """Whether an object array holds bytes that are not UTF-8 text."""
    if array.dtype != object:
        return False
    for item in array.reshape(-1).tolist():
        if isinstance(item, bytes):
            try:
                item.decode("utf-8")
            except UnicodeDecodeError:
                return True
    return False


def _binary(array: np.ndarray) -> bytes:
    if array.dtype == object:  # BYTES: each element a 4-byte little-endian length, then bytes
        parts = []
        for item in array.reshape(-1).tolist():
            raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts.append(struct.pack("<I", len(raw)) + raw)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def decode_response(
    protocol: str, content: bytes, headers: Mapping[str, str], *, rows: int, url: str
) -> dict[str, np.ndarray]:
    """The named output arrays of one response (``WireError``: not the protocol's shape)."""
    try:
        if protocol == V1:
            return _v1_outputs(json.loads(content), rows)
        length = headers.get(_HEADER)
        if length is None:
            return _v2_outputs(json.loads(content), b"")
        size = int(length)
        return _v2_outputs(json.loads(content[:size]), content[size:])
    except (KeyError, IndexError, TypeError, ValueError, struct.error) as exc:
        raise WireError(f"unexpected response from {url}: {type(exc).__name__}: {exc}") from None


def _v1_outputs(body: Any, rows: int) -> dict[str, np.ndarray]:
    if "predictions" in body:
        predictions = body["predictions"]
        if predictions and isinstance(predictions[0], dict):
            names = list(predictions[0])
            return {n: _array([p[n] for p in predictions]) for n in names}
        return {tensors.ONLY: _array(predictions)}
    outputs = body["outputs"]  # the columnar answer
    if isinstance(outputs, dict):
        return {name: _array(value) for name, value in outputs.items()}
    return {tensors.ONLY: _array(outputs)}


def _array(value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind in "US":
        return array.astype(object)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    return array.astype(np.float64) if array.dtype.kind == "f" else array


def _v2_outputs(body: Any, blob: bytes) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    offset = 0
    for tensor in body["outputs"]:
        shape = [int(d) for d in tensor["shape"]]
        datatype = str(tensor["datatype"])
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            raw = blob[offset : offset + int(size)]
            offset += int(size)
            out[tensor["name"]] = _from_binary(raw, datatype, shape)
        elif datatype == "BYTES":
            out[tensor["name"]] = np.asarray(tensor["data"], dtype=object).reshape(shape)
        else:
            out[tensor["name"]] = np.asarray(tensor["data"], dtype=_NUMPY[datatype]).reshape(shape)
    return out


def _from_binary(raw: bytes, datatype: str, shape: list[int]) -> np.ndarray:
    if datatype == "BYTES":
        items, offset = [], 0
        while offset < len(raw):
            (length,) = struct.unpack_from("<I", raw, offset)
            items.append(raw[offset + 4 : offset + 4 + length])
            offset += 4 + length
        return np.asarray(items, dtype=object).reshape(shape)
    dtype = np.dtype(_NUMPY[datatype]).newbyteorder("<")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(_NUMPY[datatype])
