"""Fixtures for the I/O streamlet tests: the schemas, and streamlets made as the runtime does.

``make(cls, config)`` parses the config with the same ``parse_config`` the runtime
uses, instantiates the class, and calls ``setup`` with a context that carries the
test schema store, as the runtime passes its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from streamflow.api import config as config_mod
from streamflow.api import describe
from streamflow.api.streamlet import Context, Streamlet
from streamflow.schema import SchemaStore

SCHEMAS = Path(__file__).parent / "schemas"

S = TypeVar("S", bound=Streamlet)
Make = Callable[..., Any]


@pytest.fixture(scope="session")
def store() -> SchemaStore:
    made = SchemaStore([SCHEMAS])
    assert not made.problems, made.problems
    return made


def build(cls: type[S], config: dict[str, Any] | None, store: SchemaStore, **kwargs: Any) -> S:
    """``cls`` configured from a raw config and set up, as a runtime replica does it."""
    parsed = config_mod.parse_config(describe(cls), config or {})
    streamlet = cls(parsed, **kwargs)
    context = Context(
        app="app",
        streamlet="io",
        replica=0,
        config=parsed,
        logger=logging.getLogger("streamflow.streamlet.io"),
        schema_store=store,
    )
    streamlet.context = context
    streamlet.setup(context)
    return streamlet


@pytest.fixture
def make(store: SchemaStore) -> Make:
    def factory(cls: type[S], config: dict[str, Any] | None = None, **kwargs: Any) -> S:
        return build(cls, config, store, **kwargs)

    return factory
