"""Helpers of the example tests: a blueprint's own config, descriptors, an in-memory classifier."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import yaml

from streamflow.testkit import StreamletHarness

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"


def blueprint_config(blueprint: Path, streamlet: str) -> dict[str, Any]:
    """The config a blueprint gives one of its streamlets, so tests serve what users run."""
    spec = yaml.safe_load(blueprint.read_text())
    config: dict[str, Any] = spec["streamlets"][streamlet].get("config", {})
    return config


def descriptor(name: str, version: int, kind: str, data: bytes) -> dict[str, Any]:
    """A ModelDescriptor carrying its artifact inline, as `streamflow model push` sends it."""
    return {
        "name": name,
        "version": version,
        "kind": kind,
        "data": data,
        "location": None,
        "sha256": hashlib.sha256(data).hexdigest(),
        "parameters": {},
        "description": f"test v{version}",
        "created_at": dt.datetime.now(dt.UTC),
    }


def classifier(cls: type, config: dict[str, Any], tmp_path: Path) -> StreamletHarness:
    return StreamletHarness(
        cls, config={**config, "cache_dir": str(tmp_path / "cache")}, schema_paths=[SCHEMAS]
    )


def serve(h: StreamletHarness, desc: dict[str, Any], *, timeout: float = 60.0) -> dict[str, Any]:
    """Apply a descriptor and run between batches until its final status; that status."""
    h.control("model", desc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for out in h.between_batches():
            if out.outlet == "status" and out.value["version"] == desc["version"]:
                status: dict[str, Any] = out.value
                return status
        time.sleep(0.05)  # polling the loader thread, not synchronising
    raise AssertionError(f"version {desc['version']} reached no final state in {timeout:.0f}s")


def predictions(h: StreamletHarness, values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    h.feed("in", values, keys=[v["id"] for v in values])
    return [o.value for o in h.run() if o.outlet == "out"]


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()[:limit]
    return [json.loads(line) for line in lines]
