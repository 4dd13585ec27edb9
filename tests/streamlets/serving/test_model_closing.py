"""Replaced and last models are closed: a retired one at the next batch, the rest at shutdown."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Mapping

import numpy as np

from streamflow.api.streamlet import Context
from streamflow.streamlets.serving import tensors
from streamflow.streamlets.serving.follower import ActiveModel, ModelFollower
from streamflow.streamlets.serving.predictor import Gradients, Predictor


class _Model:
    """A predictor that only records that it was closed."""

    description = "fake"
    signature = None
    remote = True
    gradients: Gradients | None = None

    def __init__(self, name: str, closed: list[str]) -> None:
        self.name = name
        self.closed = closed

    async def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}

    def infer_blocking(
        self, inputs: Mapping[str, np.ndarray], *, loop: asyncio.AbstractEventLoop
    ) -> dict[str, np.ndarray]:
        return {}

    async def aclose(self) -> None:
        self.closed.append(self.name)


def _swap_to(follower: ModelFollower, version: int, predictor: Predictor) -> None:
    """What a finished load looks like to ``between_batches``."""
    signature = tensors.ModelSignature(inputs={}, outputs={})
    mapping = tensors.BoundMapping(inputs={}, outputs=[], signature=signature)
    loaded: concurrent.futures.Future[ActiveModel] = concurrent.futures.Future()
    loaded.set_result(ActiveModel("m", version, "V2", predictor, "fake", mapping))
    follower._pending = ({"name": "m", "version": version}, loaded, threading.Event())
    assert follower.between_batches() is not None


def test_a_fake_model_is_a_predictor() -> None:
    assert isinstance(_Model("m", []), Predictor)


def test_a_replaced_model_closes_at_the_next_batch_and_the_last_one_at_shutdown() -> None:
    closed: list[str] = []
    follower = ModelFollower({"input_fields": ["x"]})
    context = Context()
    follower.context = context
    follower.setup(context)
    _swap_to(follower, 1, _Model("v1", closed))
    _swap_to(follower, 2, _Model("v2", closed))
    assert closed == []  # between_batches is synchronous: nothing closed there

    async def lifetime() -> None:
        await follower.close_retired()  # what a batch does first
        assert closed == ["v1"]
        _swap_to(follower, 3, _Model("v3", closed))
        await follower.teardown()
        await context.aclose()  # what the runtime does after teardown

    asyncio.run(lifetime())
    assert closed == ["v1", "v2", "v3"]  # v2 retired but no batch came: closed at shutdown
