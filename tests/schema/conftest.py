"""Fixtures for the schema tests: schema directories written per test, inline schemas,
and the column codec's two paths."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamflow.schema import Schema, SchemaStore, columns


@pytest.fixture
def schema_dir(tmp_path: Path) -> Callable[..., Path]:
    """Write ``{relative path: JSON document or raw text}`` under a fresh directory."""

    def write(files: dict[str, Any]) -> Path:
        root = tmp_path / "schemas"
        for relative, doc in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2))
        return root

    return write


@pytest.fixture
def make_schema() -> Callable[[dict[str, Any]], Schema]:
    """A Schema from one inline document, in a store of its own."""

    def make(doc: dict[str, Any]) -> Schema:
        store = SchemaStore(include_builtin=False)
        names = store.add_schema(doc)  # nested types first, the document's own type last
        assert store.problems == []
        return store.get(names[-1])

    return make


@pytest.fixture(params=[True, False], ids=["native", "fallback"])
def native(request: pytest.FixtureRequest) -> bool:
    """Each column codec test runs twice: the native module (where it is built), and the
    fastavro fallback, which must give the same answers."""
    if request.param and columns._native is None:
        pytest.skip("streamflow._native is not built")
    return bool(request.param)
