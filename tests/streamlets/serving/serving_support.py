"""Shared helpers for the serving tests: descriptors, the classifier harness, waiting."""

from __future__ import annotations

import datetime as dt
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from streamflow.testkit import StreamletHarness

ROOT = Path(__file__).parents[3]
WINE = ROOT / "blueprints" / "wine"
SCHEMAS = ROOT / "schemas" / "examples" / "wine"
if str(WINE) not in sys.path:
    sys.path.insert(0, str(WINE))

import classifier_app  # noqa: E402

from tests.model_fixtures import load_wine_trainer  # noqa: E402

FEATURES: list[str] = load_wine_trainer().FEATURES
CONFIG: dict[str, Any] = {
    "input_fields": FEATURES,
    "output_field": "probabilities",
    "class_field": "predicted",
    "allowlist": ["http://127.0.0.1:"],
}


def descriptor(
    version: int,
    kind: str,
    *,
    data: bytes | None = None,
    location: str | None = None,
    sha256: str | None = "auto",
    parameters: dict[str, str] | None = None,
    name: str = "wine",
) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest() if data is not None and sha256 == "auto" else None
    return {
        "name": name,
        "version": version,
        "kind": kind,
        "data": data,
        "location": location,
        "sha256": digest if sha256 == "auto" else sha256,
        "parameters": parameters or {},
        "description": f"test v{version}",
        "created_at": dt.datetime.now(dt.UTC),
    }


def harness(tmp_path: Path, **config: Any) -> StreamletHarness:
    return StreamletHarness(
        classifier_app.WineClassifier,
        config={**CONFIG, "cache_dir": str(tmp_path / "cache"), **config},
        schema_paths=[SCHEMAS],
    )


def settle(h: StreamletHarness, version: int, *, timeout: float = 60.0) -> dict[str, Any]:
    """Run between-batches until version reaches a final state; that status record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for out in h.between_batches():
            if out.outlet == "status" and out.value["version"] == version:
                return out.value
        time.sleep(0.05)
    raise AssertionError(f"version {version} reached no final state in {timeout:.0f}s")
