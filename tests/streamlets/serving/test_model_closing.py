"""Replaced and last models are closed: a retired one at the next batch, the rest at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import numpy as np

from streamflow.api.streamlet import Context
from streamflow.models import tensors
from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.kinds import ModelKind
from streamflow.models.predictor import Gradients, Predictor
from streamflow.streamlets.serving.follower import ActiveModel, ModelFollower
from tests.waiting import wait_until


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
    """A load that makes ``predictor``, swapped in by ``between_batches``."""
    signature = tensors.ModelSignature(inputs={}, outputs={})
    mapping = tensors.BoundMapping(inputs={}, outputs=[], signature=signature)
    active = ActiveModel("m", version, "V2", predictor, "fake", mapping)
    follower._load = lambda descriptor, cancelled=None: active  # type: ignore[method-assign]
    follower._swap.submit(ModelDescriptor("m", version, ModelKind.OPEN_INFERENCE_V2))
    swapped = wait_until(follower.between_batches, what=f"version {version} swapped in", timeout=30)
    assert swapped.value["state"] == "serving"
    assert follower.current is active


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
