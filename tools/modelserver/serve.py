"""Serve one Keras or TensorFlow model with KServe's own ModelServer, over V1 and V2.

Why KServe's real server and not a fake: streamflow's remote model client must
speak the protocols as a production server speaks them (KServe V1 `:predict`, the
Open Inference Protocol V2 `/infer`, their health and metadata endpoints, their
error bodies), so its tests and the bench run against the real thing. This runs
in tools/modelserver/.venv (see `setup`), apart from streamflow's dependencies.

How KServe 0.21 routes a request to `predict`: one `Model` serves both protocols.
A V1 body is decoded to a plain `dict` ({"instances": [...]}), and the `dict` we
return is sent back as JSON. A V2 body (REST or gRPC) becomes an `InferRequest`,
and we must return an `InferResponse`, which KServe encodes as JSON, as binary
tensor data when the request asked for it, or as a gRPC message.

    python serve.py --model-name wine --model-path wine-v1.keras --http-port 8080
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up banner quiet

# KServe parses sys.argv when imported (parse_known_args, underscored option names);
# ours are hyphenated and none is a prefix of one of its options, so it ignores them.
import kserve
import numpy as np
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

OUTPUT_NAME = "probabilities"

# KServe 0.21 still answers with ORJSONResponse, which FastAPI warns about once per route.
warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")

Predictor = Callable[[np.ndarray], np.ndarray]


class TensorFlowModel(kserve.Model):
    """A Keras `.keras` file or a SavedModel dir: float32 rows in, float32 rows out."""

    def __init__(self, name: str, path: Path, *, version: str | None = None) -> None:
        super().__init__(name)
        self.path = path
        self.version = version
        self._predict: Predictor | None = None
        self._features = 0
        self._outputs = 0

    def load(self) -> bool:
        self._predict, self._features = _load(self.path)
        # Warm up: the first call traces the graph; do it now, not in the first request.
        self._outputs = int(self._predict(np.zeros((1, self._features), np.float32)).shape[-1])
        self.ready = True
        return self.ready

    def get_input_types(self) -> list[dict[str, Any]]:
        return [{"name": "input", "datatype": "FP32", "shape": [-1, self._features]}]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [{"name": OUTPUT_NAME, "datatype": "FP32", "shape": [-1, self._outputs]}]

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

    def _predict_v1(self, payload: dict[str, Any]) -> dict[str, Any]:
        # "instances" is KServe V1 and TF Serving's row format; "inputs" is TF Serving's
        # columnar format, which for a single unnamed input is the same list of rows.
        rows = payload.get("instances", payload.get("inputs"))
        if not isinstance(rows, list):
            raise InvalidInput('Expected "instances": a list of rows of numbers.')
        return {"predictions": self._run(_as_matrix(rows, self._features)).tolist()}

    def _infer_v2(self, request: InferRequest) -> InferResponse:
        if len(request.inputs) != 1:
            raise InvalidInput(f"Expected one input tensor, got {len(request.inputs)}.")
        tensor = request.inputs[0]
        if tensor.datatype not in ("FP32", "FP64", "FP16", "INT32", "INT64"):
            raise InvalidInput(f"Input {tensor.name!r} has datatype {tensor.datatype}; use FP32.")
        result = self._run(_as_matrix(tensor.as_numpy(), self._features))
        output = InferOutput(name=OUTPUT_NAME, shape=list(result.shape), datatype="FP32")
        output.set_data_from_numpy(result, binary_data=request.use_binary_outputs)
        return InferResponse(
            response_id=request.id or str(uuid.uuid4()),
            model_name=self.name,
            model_version=self.version,
            infer_outputs=[output],
            use_binary_outputs=request.use_binary_outputs,
        )

    def _run(self, rows: np.ndarray) -> np.ndarray:
        assert self._predict is not None, "predict before load"
        return np.asarray(self._predict(rows), dtype=np.float32)


def _as_matrix(rows: Any, features: int) -> np.ndarray:
    try:
        matrix = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"The rows are not all numbers: {error}") from None
    if matrix.ndim == 1 and matrix.size == features:
        matrix = matrix.reshape(1, features)
    elif matrix.ndim == 1 and matrix.size % features == 0:
        matrix = matrix.reshape(-1, features)  # V2 JSON data may come flattened
    if matrix.ndim != 2 or matrix.shape[1] != features:
        raise InvalidInput(f"Expected rows of {features} numbers, got shape {list(matrix.shape)}.")
    return matrix


def _load(path: Path) -> tuple[Predictor, int]:
    """A compiled predict function for the artifact, and how many features a row has."""
    import tensorflow as tf  # after argument parsing, so --help is instant

    if path.is_dir():
        signature = tf.saved_model.load(str(path)).signatures["serving_default"]
        (input_name, spec), *others = signature.structured_input_signature[1].items()
        if others:
            raise SystemExit(f"{path}: the serving signature takes more than one input.")
        outputs = signature.structured_outputs
        output_name = OUTPUT_NAME if OUTPUT_NAME in outputs else next(iter(outputs))

        def run_signature(rows: np.ndarray) -> np.ndarray:
            return signature(**{input_name: tf.constant(rows)})[output_name].numpy()

        return run_signature, int(spec.shape[-1])

    import keras

    model = keras.models.load_model(path, safe_mode=True, compile=False)
    features = int(model.inputs[0].shape[-1])
    spec = tf.TensorSpec(shape=(None, features), dtype=tf.float32)
    # One traced graph for every batch size: model.predict() would re-wrap each call
    # in a dataset and cost tens of milliseconds.
    call = tf.function(lambda rows: model(rows, training=False), input_signature=[spec])

    def run_keras(rows: np.ndarray) -> np.ndarray:
        return call(tf.constant(rows)).numpy()

    return run_keras, features


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
