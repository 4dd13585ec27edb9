"""The model-server client on its own, over httpx's mock transport: what one batch's
requests leave behind when one of them fails."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest

from streamflow.api.streamlet import Backpressure
from streamflow.models import remote, tensors


def _client(handler: httpx.MockTransport) -> remote.InferenceClient:
    settings = remote.ClientSettings(batch_size=1, concurrency=4, retries=0)
    client = remote.InferenceClient(
        protocol=remote.V1, base_url="http://server", model="m", settings=settings
    )
    client._client = httpx.AsyncClient(transport=handler)
    client._limit = asyncio.Semaphore(settings.concurrency)
    return client


def test_a_chunk_that_fails_cancels_the_rest_of_the_batch() -> None:
    """The batch goes back with ``Backpressure``: before, its other requests kept running
    between batches, calling the server and holding the client's concurrency slots."""
    started: list[int] = []
    never = asyncio.Event()

    async def answer(request: httpx.Request) -> httpx.Response:
        row = json.loads(request.content)["instances"][0][0]
        started.append(row)
        if row == 0:
            return httpx.Response(503)
        await never.wait()  # the other chunks: a server slow to answer
        return httpx.Response(200, json={"predictions": [[row]]})

    client = _client(httpx.MockTransport(answer))
    inputs = {tensors.ONLY: np.array([[0.0], [1.0], [2.0]], dtype=np.float32)}
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(Backpressure, match="model server failed: HTTP 503"):
            loop.run_until_complete(client.infer(inputs))
        assert sorted(started) == [0, 1, 2]
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        assert left == []  # nothing of the batch runs on
        assert client._limit is not None and not client._limit.locked()
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


def test_every_chunk_answers_in_order() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        rows = json.loads(request.content)["instances"]
        return httpx.Response(200, json={"predictions": [[r[0] * 10] for r in rows]})

    client = _client(httpx.MockTransport(answer))
    inputs = {tensors.ONLY: np.array([[0.0], [1.0], [2.0]], dtype=np.float32)}
    loop = asyncio.new_event_loop()
    try:
        out = loop.run_until_complete(client.infer(inputs))
        assert out[tensors.ONLY].tolist() == [[0.0], [10.0], [20.0]]
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
