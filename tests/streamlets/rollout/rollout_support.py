"""Control and evidence records of a rollout, as the controller's tests and others feed them."""

from __future__ import annotations

import json
from typing import Any

POLICY: dict[str, Any] = {
    "steps": [
        {"mode": "shadow", "windows": 1, "min_records": 100},
        {"mode": "canary", "share": 10, "windows": 2},
        {"mode": "canary", "share": 50, "min_labels": 200},
    ],
    "max_drop": 0.0,
    "max_labels": 4000,
    "max_error_rate": 0.05,
}


def descriptor(
    version: int, rollout: dict[str, Any] | None = None, **parameters: str
) -> dict[str, Any]:
    return {
        "name": "wine",
        "version": version,
        "kind": "ONNX",
        "data": b"model bytes",
        "location": None,
        "sha256": None,
        "parameters": parameters,
        "description": "",
        "created_at": 0,
        "rollout": rollout,
    }


def candidate(version: int, mode: str, share: float = 0.0, policy: Any = POLICY) -> dict[str, Any]:
    parameters = {"rollout-policy": policy if isinstance(policy, str) else json.dumps(policy)}
    return descriptor(version, {"mode": mode, "share": share, "arms": []}, **parameters)


def version(
    version: int, shadow: bool, records: int, labelled: int, correct: int, failures: int = 0
) -> dict[str, Any]:
    return {
        "version": version,
        "shadow": shadow,
        "records": records,
        "failures": failures,
        "labelled": labelled,
        "correct": correct,
        "squared_error": 0.0,
        "unlabelled": 0,
        "classes": {"0": records // 2, "1": records - records // 2},
        "latency": [0, 0, records],
        "latency_p50_ms": None,
        "latency_p99_ms": None,
    }


def evidence(
    window: int, versions: list[dict[str, Any]], partition: int = 0, **shared: int
) -> dict[str, Any]:
    return {
        "model": "wine",
        "inlet": "predictions",
        "partition": partition,
        "window": window,
        "start_time": window * 10_000,
        "end_time": (window + 1) * 10_000,
        "versions": versions,
        "compared": shared.get("compared", 0),
        "agreed": shared.get("agreed", 0),
        "distance": None,
        "unmatched_labels": 0,
        "duplicate_labels": 0,
        "time": 0,
    }


def window(
    index: int,
    *,
    stable: tuple[int, int, int],
    candidate: tuple[int, int, int],
    shadow: bool = False,
    failures: int = 0,
) -> dict[str, Any]:
    return evidence(
        index,
        [version(1, False, *stable), version(2, shadow, *candidate, failures=failures)],
        compared=stable[0] if shadow else 0,
        agreed=stable[0] - 3 if shadow else 0,
    )
