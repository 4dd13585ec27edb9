"""Every mapping error a serving test triggers says each sentence once.

A message that repeats itself (the shorthand's two outputs failing for one
reason used to print the same sentence twice) is hard to act on; this checks
every :class:`MappingError` made in this directory's tests, whatever they assert.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from streamflow.models.tensor_specs import MappingError


def repeated_sentences(message: str) -> set[str]:
    sentences = [s.strip() for s in re.split(r"[.;](?:\s|$)", message) if s.strip()]
    return {s for s in sentences if sentences.count(s) > 1}


@pytest.fixture(autouse=True)
def _mapping_errors_say_each_thing_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    made: list[str] = []
    original = MappingError.__init__

    def recorded(self: MappingError, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(str(self))

    monkeypatch.setattr(MappingError, "__init__", recorded)
    yield
    for message in made:
        assert not repeated_sentences(message), f"repeated in: {message}"
