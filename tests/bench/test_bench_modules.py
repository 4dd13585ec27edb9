"""Every benchmark module imports: the benchmarks borrow test helpers, and a helper
renamed in the tests once broke the serving scenario, found only 23 minutes into a run."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import bench

# plots runs in the peers' environment (bench/.venv, with matplotlib), not the project's
ELSEWHERE = {"__main__", "plots"}
MODULES = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name not in ELSEWHERE)


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_module_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")
