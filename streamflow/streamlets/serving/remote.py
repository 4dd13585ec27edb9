"""Calling a model server: TF Serving / KServe V1 ``:predict`` and Open Inference Protocol V2.

One :class:`InferenceClient` per served model. A batch of records is split into
requests of at most ``batch_size`` instances, and up to ``concurrency`` of them
are in flight at once over pooled keep-alive connections (HTTP/2 optional).
Transient failures (connection errors, timeouts, 5xx) are retried with
exponential backoff; when they persist, a circuit breaker opens and every call
raises :class:`~streamflow.api.Backpressure` at once, so the runtime pauses
consumption and retries the batch later instead of dropping records or
dead-lettering them. A 4xx is permanent: :class:`PermanentError` keeps the
server's reason, and the record goes to the dead-letter topic.

The drift and explanation streamlets call hosted detectors and explainers
through this same client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import numpy as np

from streamflow.api.streamlet import Backpressure

__all__ = [
    "CircuitBreaker",
    "ClientSettings",
    "InferenceClient",
    "PermanentError",
    "Unavailable",
    "check_ready",
]

T = TypeVar("T")

V1 = "TF_SERVING"
V2 = "OPEN_INFERENCE_V2"


class Unavailable(Exception):
    """The server did not answer usefully after the retries (transient)."""


class PermanentError(Exception):
    """The server refused the request (4xx); retrying the same input will not help."""


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    batch_size: int = 64
    concurrency: int = 4
    timeout: float = 5.0
    retries: int = 2
    backoff: float = 0.1
    breaker_failures: int = 3
    breaker_cooldown: float = 2.0
    http2: bool = False


class CircuitBreaker:
    """Opens after ``failures`` consecutive failures; lets a trial through after ``cooldown``."""

    def __init__(self, *, failures: int, cooldown: float, clock: Any = time.monotonic) -> None:
        self.failures = failures
        self.cooldown = cooldown
        self._clock = clock
        self._consecutive = 0
        self._open_until = 0.0

    def check(self) -> None:
        remaining = self._open_until - self._clock()
        if remaining > 0:
            raise Backpressure(
                "the model server is unavailable (circuit open)", retry_after=remaining
            )

    def success(self) -> None:
        self._consecutive = 0
        self._open_until = 0.0

    def failure(self) -> float:
        """Record a failure; returns how long callers should wait before trying again."""
        self._consecutive += 1
        if self._consecutive >= self.failures:
            self._open_until = self._clock() + self.cooldown
            return self.cooldown
        return min(self.cooldown, 0.2 * self._consecutive)


def endpoints(protocol: str, base_url: str, model: str) -> tuple[str, str]:
    """(inference URL, readiness URL) for a protocol."""
    base = base_url.rstrip("/")
    if protocol == V1:
        return f"{base}/v1/models/{model}:predict", f"{base}/v1/models/{model}"
    return f"{base}/v2/models/{model}/infer", f"{base}/v2/models/{model}/ready"


def check_ready(*, protocol: str, base_url: str, model: str, timeout: float) -> None:
    """Fail (Unavailable or PermanentError) unless the server says the model is ready."""
    _, ready = endpoints(protocol, base_url, model)
    try:
        response = httpx.get(ready, timeout=timeout)
    except httpx.HTTPError as exc:
        raise Unavailable(f"model server {base_url} is unreachable: {exc}") from None
    if response.status_code != 200:
        raise PermanentError(
            f"model {model!r} is not ready on {base_url}: HTTP {response.status_code} "
            f"{response.text[:200]}"
        )


class InferenceClient:
    def __init__(
        self,
        *,
        protocol: str,
        base_url: str,
        model: str,
        settings: ClientSettings,
        input_name: str = "input",
        output_name: str | None = None,
    ) -> None:
        self.protocol = protocol
        self.url, _ = endpoints(protocol, base_url, model)
        self.settings = settings
        self.input_name = input_name
        self.output_name = output_name
        self.breaker = CircuitBreaker(
            failures=settings.breaker_failures, cooldown=settings.breaker_cooldown
        )
        self._client: httpx.AsyncClient | None = None
        self._limit: asyncio.Semaphore | None = None

    def _http(self) -> httpx.AsyncClient:
        # created on first use, so it binds to the event loop that uses it
        if self._client is None:
            limits = httpx.Limits(
                max_connections=self.settings.concurrency,
                max_keepalive_connections=self.settings.concurrency,
            )
            self._client = httpx.AsyncClient(
                http2=self.settings.http2, limits=limits, timeout=self.settings.timeout
            )
            self._limit = asyncio.Semaphore(self.settings.concurrency)
        return self._client

    async def predict(self, batch: np.ndarray) -> np.ndarray:
        """Predictions for every row of ``batch``, in order."""
        self.breaker.check()
        http = self._http()
        size = self.settings.batch_size
        chunks = [batch[i : i + size] for i in range(0, len(batch), size)]
        results = await asyncio.gather(*(self._request(http, chunk) for chunk in chunks))
        return np.concatenate(results) if results else np.zeros((0,))

    async def call(
        self, batch: np.ndarray, *, parse: Callable[[Any, int], T], url: str | None = None
    ) -> T:
        """One request for the whole ``batch``, to ``url`` (default: the inference URL).

        It has the retries, the concurrency limit and the circuit breaker of
        ``predict``; ``parse(body, rows)`` turns the JSON answer into the result.
        Hosted detectors (a window in, a verdict out) and explainers (``:explain``)
        answer in shapes of their own, so they bring their own ``parse``.
        """
        self.breaker.check()
        result: T = await self._request(self._http(), batch, parse=parse, url=url)
        return result

    async def _request(
        self,
        http: httpx.AsyncClient,
        chunk: np.ndarray,
        *,
        parse: Callable[[Any, int], Any] | None = None,
        url: str | None = None,
    ) -> Any:
        assert self._limit is not None
        payload = self._payload(chunk)
        async with self._limit:
            for attempt in range(self.settings.retries + 1):
                try:
                    response = await http.post(url or self.url, json=payload)
                except httpx.HTTPError as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                else:
                    if response.status_code < 400:
                        self.breaker.success()
                        return (parse or self._parse)(response.json(), len(chunk))
                    if response.status_code < 500:
                        raise PermanentError(
                            f"HTTP {response.status_code} from {url or self.url}: "
                            f"{response.text[:500]}"
                        )
                    failure = f"HTTP {response.status_code}: {response.text[:200]}"
                if attempt < self.settings.retries:
                    await asyncio.sleep(self.settings.backoff * 2**attempt)
            wait = self.breaker.failure()
            raise Backpressure(f"model server failed: {failure}", retry_after=wait)

    def _payload(self, chunk: np.ndarray) -> dict[str, Any]:
        if self.protocol == V1:
            return {"instances": chunk.tolist()}
        return {
            "inputs": [
                {
                    "name": self.input_name,
                    "shape": list(chunk.shape),
                    "datatype": "FP32",
                    "data": chunk.reshape(-1).tolist(),
                }
            ]
        }

    def _parse(self, body: Any, rows: int) -> np.ndarray:
        try:
            if self.protocol == V1:
                return np.asarray(body["predictions"], dtype=np.float32).reshape(rows, -1)
            outputs = body["outputs"]
            chosen = (
                next((o for o in outputs if o["name"] == self.output_name), outputs[0])
                if self.output_name
                else outputs[0]
            )
            return np.asarray(chosen["data"], dtype=np.float32).reshape(chosen["shape"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PermanentError(f"unexpected response from {self.url}: {exc}") from None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
