"""A drift detector and an explainer hosted on KServe's own ModelServer, for the remote tests.

This is how Seldon hosts detectors and explainers: as models on a model
server. It runs in tools/modelserver/.venv (KServe and numpy, no scipy), so
the two-sample KS test is written out here with the asymptotic Kolmogorov
distribution, and the explainer explains a linear model exactly.

* ``detector`` (Open Inference Protocol V2 ``infer``): a window [n, F] in;
  ``p_val`` and ``distance`` per feature, ``is_drift`` and ``threshold`` out,
  the output names alibi-detect's servers use. Its reference is ``--reference``
  (an .npy matrix [m, F]).
* ``explainer`` (KServe V1 ``:explain``): rows in, ``{"explanations": [{"attributions":
  w * (x - b)}]}`` out, for ``--weights`` (a JSON list) and ``--baseline``.

    python hosted_models.py --http-port 8080 --reference ref.npy --weights '[1.5, -0.75]'
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
import warnings
from typing import Any

import kserve
import numpy as np
from kserve.protocol.infer_type import InferOutput, InferResponse

warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")


def ks_p_value(reference: np.ndarray, window: np.ndarray) -> tuple[float, float]:
    """(statistic, asymptotic p-value) of the two-sample Kolmogorov-Smirnov test."""
    both = np.concatenate([reference, window])
    cdf_ref = np.searchsorted(np.sort(reference), both, side="right") / len(reference)
    cdf_win = np.searchsorted(np.sort(window), both, side="right") / len(window)
    d = float(np.max(np.abs(cdf_ref - cdf_win)))
    en = np.sqrt(len(reference) * len(window) / (len(reference) + len(window)))
    lam = (en + 0.12 + 0.11 / en) * d
    k = np.arange(1, 101)
    p = float(2 * np.sum((-1.0) ** (k - 1) * np.exp(-2 * k**2 * lam**2)))
    return d, min(max(p, 0.0), 1.0)


class Detector(kserve.Model):
    def __init__(self, name: str, reference: np.ndarray, alpha: float) -> None:
        super().__init__(name)
        self.reference = reference
        self.alpha = alpha
        self.ready = True

    def predict(self, payload: Any, headers: Any = None, response_headers: Any = None) -> Any:
        tensor = payload.inputs[0]
        window = np.asarray(tensor.as_numpy(), dtype=np.float64).reshape(
            -1, self.reference.shape[1]
        )
        tests = [ks_p_value(self.reference[:, j], window[:, j]) for j in range(window.shape[1])]
        distance = np.array([t[0] for t in tests], dtype=np.float32)
        p_val = np.array([t[1] for t in tests], dtype=np.float32)
        threshold = self.alpha / len(tests)
        outputs = []
        for name, data in (
            ("is_drift", np.array([int(np.any(p_val < threshold))], dtype=np.float32)),
            ("distance", distance),
            ("p_val", p_val),
            ("threshold", np.array([threshold], dtype=np.float32)),
        ):
            output = InferOutput(name=name, shape=list(data.shape), datatype="FP32")
            output.set_data_from_numpy(data, binary_data=False)
            outputs.append(output)
        return InferResponse(
            response_id=payload.id or str(uuid.uuid4()), model_name=self.name, infer_outputs=outputs
        )


class Explainer(kserve.Model):
    def __init__(self, name: str, weights: np.ndarray, baseline: np.ndarray) -> None:
        super().__init__(name)
        self.weights = weights
        self.baseline = baseline
        self.ready = True

    def predict(self, payload: Any, headers: Any = None, response_headers: Any = None) -> Any:
        rows = np.asarray(payload["instances"], dtype=np.float64)
        return {"predictions": (rows @ self.weights).tolist()}

    def explain(self, payload: Any, headers: Any = None) -> Any:
        rows = np.asarray(payload["instances"], dtype=np.float64)
        attributions = self.weights * (rows - self.baseline)
        return {"explanations": [{"attributions": a.tolist()} for a in attributions]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--baseline", default="")
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args(sys.argv[1:])
    reference = np.load(args.reference)
    weights = np.asarray(json.loads(args.weights), dtype=np.float64)
    baseline = np.asarray(json.loads(args.baseline or "0"), dtype=np.float64)
    server = kserve.ModelServer(
        http_port=args.http_port, enable_grpc=False, workers=1, enable_latency_logging=False
    )
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    server.start(
        [Detector("detector", reference, args.alpha), Explainer("explainer", weights, baseline)]
    )
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
