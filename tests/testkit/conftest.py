"""Fixtures for the testkit tests: a harness factory that tears down what it made."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamflow.api.streamlet import Streamlet
from streamflow.testkit import StreamletHarness

SCHEMAS = Path(__file__).parent / "schemas"

HarnessFactory = Callable[..., StreamletHarness]


@pytest.fixture
def harness() -> Iterator[HarnessFactory]:
    made: list[StreamletHarness] = []

    def make(cls: type[Streamlet], **kwargs: Any) -> StreamletHarness:
        kwargs.setdefault("schema_paths", [SCHEMAS])
        made.append(StreamletHarness(cls, **kwargs))
        return made[-1]

    yield make
    for h in made:
        h.teardown()
