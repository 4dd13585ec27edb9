"""Serve one Keras or TensorFlow model with KServe's own ModelServer, over V1 and V2.

Why KServe's real server and not a fake: streamflow's remote model client must
speak the protocols as a production server speaks them (KServe V1 `:predict`, the
Open Inference Protocol V2 `/infer`, their health and metadata endpoints, their
error bodies), so its tests and the bench run against the real thing. This runs
in tools/modelserver/.venv (see `setup`), apart from streamflow's dependencies.

Models speak named, typed tensors, so this server does too: the metadata
(`GET /v2/models/{name}`) lists the model's real inputs and outputs with their
V2 datatypes and shapes (-1 for the batch), V2 `/infer` takes every input by
name and returns every output (or those the request names), and V1 `:predict`
takes `instances` as rows (a single-input model, as TF Serving does), as
objects keyed by input name, or `inputs` as columns keyed by input name. A
model with one input accepts it under any name, so a client need not know it.

How KServe 0.21 routes a request to `predict`: one `Model` serves both protocols.
A V1 body is decoded to a plain `dict` ({"instances": [...]}), and the `dict` we
return is sent back as JSON. A V2 body (REST or gRPC) becomes an `InferRequest`,
and we must return an `InferResponse`, which KServe encodes as JSON, as binary
tensor data when the request asked for it, or as a gRPC message.

    python serve.py --model-name wine --model-path wine-v1.keras --http-port 8080
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import sys
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up banner quiet

# KServe parses sys.argv when imported (parse_known_args, underscored option names);
# ours are hyphenated and none is a prefix of one of its options, so it ignores them.
import kserve
import numpy as np
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

# KServe 0.21 still answers with ORJSONResponse, which FastAPI warns about once per route.
warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")

# V2 datatypes by TensorFlow dtype name, and the NumPy dtype each one is fed as.
_V2_TYPES = {
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "bool": "BOOL",
    "string": "BYTES",
}
_NUMPY: dict[str, Any] = {
    v2: object if v2 == "BYTES" else np.dtype(tf) for tf, v2 in _V2_TYPES.items()
}

Arrays = dict[str, np.ndarray]


class Tensor(NamedTuple):
    """One input or output as the V2 metadata describes it; `shape` has -1 for unknown dims."""

    name: str
    datatype: str
    shape: list[int]

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": self.shape}


class Loaded(NamedTuple):
    """A loaded model: its named tensors, and one call from named inputs to named outputs."""

    inputs: list[Tensor]
    outputs: list[Tensor]
    run: Callable[[Arrays], Arrays]


class TensorFlowModel(kserve.Model):
    """A Keras `.keras` file or a SavedModel dir, with named, typed inputs and outputs."""

    def __init__(self, name: str, path: Path, *, version: str | None = None) -> None:
        super().__init__(name)
        self.path = path
        self.version = version
        self._model: Loaded | None = None

    @property
    def model(self) -> Loaded:
        assert self._model is not None, "used before load"
        return self._model

    def load(self) -> bool:
        self._model = _load(self.path)
        # Warm up: the first call traces the graph; do it now, not in the first request.
        self._model.run({t.name: _zeros(t) for t in self._model.inputs})
        self.ready = True
        return self.ready

    def get_input_types(self) -> list[dict[str, Any]]:
        return [t.metadata() for t in self.model.inputs]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [t.metadata() for t in self.model.outputs]

    def predict(
        self,
        payload: dict[str, Any] | InferRequest,
        headers: dict[str, str] | None = None,
        response_headers: dict[str, str] | None = None,
    ) -> dict[str, Any] | InferResponse:
        # Synchronous on purpose: KServe then calls it on the event loop with no thread
        # hop, which for a model this small costs less than the hop would.
        if isinstance(payload, InferRequest):
            return self._infer_v2(payload)
        if isinstance(payload, dict):
            return self._predict_v1(payload)
        # KServe hands over the raw bytes when the body is not declared as JSON.
        raise InvalidInput("Send the request body as JSON, with Content-Type: application/json.")

    # -- V1 -----------------------------------------------------------------------------

    def _predict_v1(self, payload: dict[str, Any]) -> dict[str, Any]:
        columns = _v1_columns(payload, [t.name for t in self.model.inputs])
        outputs = self._run({name: np.asarray(_v1_array(v)) for name, v in columns.items()})
        if len(outputs) == 1:
            return {"predictions": _json(next(iter(outputs.values())))}
        rows = len(next(iter(outputs.values())))
        as_lists = {name: _json(array) for name, array in outputs.items()}
        return {"predictions": [{n: v[i] for n, v in as_lists.items()} for i in range(rows)]}

    # -- V2 -----------------------------------------------------------------------------

    def _infer_v2(self, request: InferRequest) -> InferResponse:
        given = {tensor.name: tensor for tensor in request.inputs}
        expected = self.model.inputs
        if len(expected) == 1 and len(given) == 1:
            given = {expected[0].name: next(iter(given.values()))}  # one input: any name
        arrays: Arrays = {}
        for name, tensor in given.items():
            spec = self._input(name)
            if (tensor.datatype == "BYTES") != (spec.datatype == "BYTES"):
                raise InvalidInput(
                    f"Input {name!r} has datatype {tensor.datatype}; the model takes "
                    f"{spec.datatype}."
                )
            arrays[name] = tensor.as_numpy()
        requested = [o.name for o in request.request_outputs or []]
        outputs = self._run(arrays, only=requested)
        infer_outputs = []
        for name, array in outputs.items():
            output = InferOutput(name=name, shape=list(array.shape), datatype=_datatype(array))
            output.set_data_from_numpy(array, binary_data=request.use_binary_outputs)
            infer_outputs.append(output)
        return InferResponse(
            response_id=request.id or str(uuid.uuid4()),
            model_name=self.name,
            model_version=self.version,
            infer_outputs=infer_outputs,
            use_binary_outputs=request.use_binary_outputs,
        )

    # -- both ---------------------------------------------------------------------------

    def _input(self, name: str) -> Tensor:
        for tensor in self.model.inputs:
            if tensor.name == name:
                return tensor
        names = ", ".join(t.name for t in self.model.inputs)
        raise InvalidInput(f"The model has no input {name!r}; its inputs are {names}.")

    def _run(self, arrays: Arrays, *, only: list[str] | None = None) -> Arrays:
        missing = [t.name for t in self.model.inputs if t.name not in arrays]
        if missing:
            raise InvalidInput(f"Missing input(s) {', '.join(missing)}.")
        fed = {name: _fit(array, self._input(name)) for name, array in arrays.items()}
        rows = {len(a) for a in fed.values()}
        if len(rows) > 1:
            raise InvalidInput(f"The inputs have different batch sizes: {sorted(rows)}.")
        outputs = self.model.run(fed)
        if not only:
            return outputs
        unknown = [name for name in only if name not in outputs]
        if unknown:
            raise InvalidInput(
                f"The model has no output(s) {', '.join(unknown)}; its outputs are "
                f"{', '.join(outputs)}."
            )
        return {name: outputs[name] for name in only}


def _v1_columns(payload: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """V1 `instances` (rows or objects) or `inputs` (columns) as one value list per input."""
    if "instances" in payload:
        rows = payload["instances"]
        if not isinstance(rows, list) or not rows:
            raise InvalidInput('Expected "instances": a non-empty list of instances.')
        if all(isinstance(row, dict) and "b64" not in row for row in rows):
            keys = {key for row in rows for key in row}
            if keys != set(names) and not (len(names) == 1 and len(keys) == 1):
                raise InvalidInput(
                    f"Each instance names the inputs {', '.join(names)}; "
                    f"got {', '.join(sorted(keys))}."
                )
            if len(names) == 1:
                return {names[0]: [next(iter(row.values())) for row in rows]}
            return {name: [row[name] for row in rows] for name in names}
        if len(names) != 1:
            raise InvalidInput(
                f"The model has inputs {', '.join(names)}: send each instance as an object "
                'keyed by input name, or columns as {"inputs": {name: [...]}}.'
            )
        return {names[0]: rows}
    columns = payload.get("inputs")
    if isinstance(columns, dict):
        if len(names) == 1 and len(columns) == 1:
            return {names[0]: next(iter(columns.values()))}
        return columns
    if isinstance(columns, list) and len(names) == 1:
        return {names[0]: columns}  # TF Serving's columnar form of a single unnamed input
    raise InvalidInput('Expected "instances": a list of rows, or "inputs": {name: [...]}.')


def _v1_array(values: Any) -> Any:
    """V1 JSON values; TF Serving's {"b64": ...} objects become the bytes they encode."""
    if isinstance(values, dict) and set(values) == {"b64"}:
        return base64.b64decode(values["b64"])
    if isinstance(values, list):
        if values and all(isinstance(v, str | bytes | dict) for v in values):
            array = np.empty(len(values), dtype=object)
            array[:] = [_v1_array(v) for v in values]
            return array
        return [_v1_array(v) for v in values]
    return values


def _fit(array: np.ndarray, spec: Tensor) -> np.ndarray:
    """`array` as the model's dtype and shape, or InvalidInput that says what was expected."""
    want = _NUMPY.get(spec.datatype)
    if want is object:
        if array.dtype != object and array.dtype.kind not in "SU":
            raise InvalidInput(f"Input {spec.name!r} takes strings; got {array.dtype} values.")
        array = np.frompyfunc(_as_bytes, 1, 1)(np.asarray(array, dtype=object))
        array = np.asarray(array, dtype=object)
    else:
        try:
            array = np.asarray(array, dtype=want)
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"Input {spec.name!r}: not all numbers: {error}") from None
    dims = spec.shape[1:]
    known = all(d > 0 for d in dims)
    size = int(np.prod(dims)) if known else 0
    if array.ndim - 1 < len(dims) and size and array.size % size == 0:
        array = array.reshape(-1, *dims)  # a single row, or V2 data sent flattened
    if array.ndim - 1 != len(dims) or any(
        d > 0 and d != a for d, a in zip(dims, array.shape[1:], strict=True)
    ):
        what = f"rows of {dims[0]} numbers" if len(dims) == 1 and known else f"shape {spec.shape}"
        raise InvalidInput(f"Input {spec.name!r}: expected {what}, got shape {list(array.shape)}.")
    return array


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidInput(f"Expected a string, got {type(value).__name__} {value!r}.")


def _as_text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _zeros(spec: Tensor) -> np.ndarray:
    shape = [1 if d < 0 else d for d in spec.shape]
    if spec.datatype == "BYTES":
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=_NUMPY[spec.datatype])


def _datatype(array: np.ndarray) -> str:
    if array.dtype == object or array.dtype.kind in "SU":
        return "BYTES"
    return _V2_TYPES[array.dtype.name]


def _json(array: np.ndarray) -> list[Any]:
    """An output as JSON lists; strings as UTF-8 text (V1 has no bytes)."""
    if array.dtype == object:
        array = np.frompyfunc(_as_text, 1, 1)(array)
    values: list[Any] = array.tolist()
    return values


# -- loading --------------------------------------------------------------------------


def _tensor(name: str, dtype: Any, shape: Any) -> Tensor:
    import tensorflow as tf

    dtype_name = tf.as_dtype(dtype).name
    if dtype_name not in _V2_TYPES:
        raise SystemExit(f"serve.py: {name!r} has dtype {dtype_name}, which V2 cannot carry.")
    dims = [-1 if d is None else int(d) for d in shape]
    return Tensor(name, _V2_TYPES[dtype_name], dims)


def _load(path: Path) -> Loaded:
    """The artifact's named tensors and a compiled call; a SavedModel's `serving_default`."""
    import tensorflow as tf  # after argument parsing, so --help is instant

    if path.is_dir():
        loaded = tf.saved_model.load(str(path))
        signature = loaded.signatures["serving_default"]
        specs = signature.structured_input_signature[1]
        inputs = [_tensor(name, spec.dtype, spec.shape) for name, spec in specs.items()]
        outputs = [
            _tensor(name, spec.dtype, spec.shape)
            for name, spec in signature.structured_outputs.items()
        ]

        def run_signature(arrays: Arrays) -> Arrays:
            _ = loaded  # the signature's variables live as long as the object that loaded them
            fed = {name: tf.constant(arrays[name], dtype=specs[name].dtype) for name in specs}
            return {name: value.numpy() for name, value in signature(**fed).items()}

        return Loaded(inputs, outputs, run_signature)

    import keras

    model = keras.models.load_model(path, safe_mode=True, compile=False)
    # A functional model's inputs and outputs are a tensor, a list, or a dict by name.
    by_name = isinstance(model.input, dict)
    given = list(model.input.items()) if by_name else [(t.name, t) for t in model.inputs]
    inputs = [_tensor(name, t.dtype, t.shape) for name, t in given]
    declared = (
        model.output.items()
        if isinstance(model.output, dict)
        else zip(model.output_names, model.outputs, strict=True)
    )
    outputs = [_tensor(name, t.dtype, t.shape) for name, t in declared]
    tf_specs = [tf.TensorSpec([None, *t.shape[1:]], tf.as_dtype(t.dtype)) for _, t in given]

    def forward(*tensors: Any) -> Any:
        if by_name:
            return model({t.name: x for t, x in zip(inputs, tensors, strict=True)}, training=False)
        return model(tensors[0] if len(tensors) == 1 else list(tensors), training=False)

    # One traced graph for every batch size: model.predict() would re-wrap each call
    # in a dataset and cost tens of milliseconds.
    call = tf.function(forward, input_signature=tf_specs)

    def run_keras(arrays: Arrays) -> Arrays:
        fed = [
            tf.constant(arrays[t.name], dtype=s.dtype)
            for t, s in zip(inputs, tf_specs, strict=True)
        ]
        result = call(*fed)
        if isinstance(result, dict):
            return {name: value.numpy() for name, value in result.items()}
        values = result if isinstance(result, list | tuple) else [result]
        return {t.name: value.numpy() for t, value in zip(outputs, values, strict=True)}

    return Loaded(inputs, outputs, run_keras)


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-name", required=True, help="the name in the endpoint paths")
    parser.add_argument("--model-path", required=True, type=Path, help=".keras file or dir")
    parser.add_argument("--model-version", default=None, help="reported in V2 responses")
    parser.add_argument("--http-port", required=True, type=int)
    parser.add_argument("--grpc-port", type=int, default=None, help="serve V2 gRPC too")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads per op")
    parser.add_argument("--access-log", action="store_true", help="log every request")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    if not args.model_path.exists():
        raise SystemExit(f"serve.py: no model at {args.model_path}")
    import tensorflow as tf

    # A test fixture, not a production server: a thread or two is plenty for this model.
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    model = TensorFlowModel(args.model_name, args.model_path, version=args.model_version)
    model.load()
    server = kserve.ModelServer(
        http_port=args.http_port,
        grpc_port=args.grpc_port or 0,
        enable_grpc=args.grpc_port is not None,
        workers=1,
        max_threads=2,
        max_asyncio_workers=2,
        enable_latency_logging=False,
        grace_period=2,
    )
    if not args.access_log:  # KServe configures logging in the constructor above
        for name in ("uvicorn.access", "kserve.trace"):  # two lines for every request
            logging.getLogger(name).setLevel(logging.WARNING)
    server.start([model])  # returns once SIGTERM or SIGINT has stopped the servers
    logging.shutdown()
    # Skip the interpreter's teardown: with TensorFlow loaded it takes seconds, and a
    # stop (or a restart on the same port) should not wait for it. Nothing is left to flush.
    os._exit(0)


if __name__ == "__main__":
    main()
