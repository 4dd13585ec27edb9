"""Fixtures shared by the streamlets' tests."""

from __future__ import annotations

from typing import Any

import pytest

from streamflow.models import tensors


@pytest.fixture
def tensors_from_columns(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each call of ``BoundMapping.encode_columns`` from here on: whether it gave the
    batch's tensors straight from its columns (True) or left them to the records."""
    calls: list[bool] = []
    encode_columns = tensors.BoundMapping.encode_columns

    def spied(self: tensors.BoundMapping, columns: Any) -> Any:
        found = encode_columns(self, columns)
        calls.append(found is not None)
        return found

    monkeypatch.setattr(tensors.BoundMapping, "encode_columns", spied)
    return calls
