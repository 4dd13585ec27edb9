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
import logging
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx
import numpy as np

from streamflow.api.streamlet import Backpressure
from streamflow.models import tensors, wire
from streamflow.models.predictor import Gradients

__all__ = [
    "CircuitBreaker",
    "ClientSettings",
    "InferenceClient",
    "PermanentError",
    "Unavailable",
    "check_ready",
    "endpoints",
    "explain_url",
    "fetch_signature",
]

log = logging.getLogger("streamflow.streamlets.serving")

T = TypeVar("T")

V1 = wire.V1
V2 = wire.V2

_TENSOR_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}")


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
    """(inference URL, readiness URL) for a protocol.

    The model name is one path segment, quoted: a name such as ``../admin`` must not
    move the request out of the allowlisted location.
    """
    base = base_url.rstrip("/")
    if model in ("", ".", ".."):
        raise PermanentError(f"{model!r} is not a model name")
    model = urllib.parse.quote(model, safe="")
    if protocol == V1:
        return f"{base}/v1/models/{model}:predict", f"{base}/v1/models/{model}"
    return f"{base}/v2/models/{model}/infer", f"{base}/v2/models/{model}/ready"


def check_ready(*, protocol: str, base_url: str, model: str, timeout: float) -> None:
    """Fail (Unavailable or PermanentError) unless the server says the model is ready.

    The server's body is not repeated: what a model server says goes into logs at
    most, never onto the status topic, where anyone reading it would see it.
    """
    _, ready = endpoints(protocol, base_url, model)
    try:
        response = httpx.get(ready, timeout=timeout)
    except httpx.HTTPError as exc:
        raise Unavailable(f"model server {base_url} is unreachable: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise PermanentError(
            f"model {model!r} is not ready on {base_url}: HTTP {response.status_code}"
        )


def fetch_signature(
    *, protocol: str, base_url: str, model: str, timeout: float
) -> tensors.ModelSignature | None:
    """The model's tensors from V2 metadata (``GET /v2/models/{m}``); V1 servers cannot say."""
    if protocol != V2:
        return None
    url = endpoints(V2, base_url, model)[1].removesuffix("/ready")
    try:
        response = httpx.get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        raise Unavailable(f"model server {base_url} is unreachable: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise PermanentError(
            f"no metadata for model {model!r} on {base_url}: HTTP {response.status_code}"
        )
    try:
        body = response.json()
        inputs, outputs = body.get("inputs") or [], body.get("outputs") or []
        if not inputs or not outputs:  # optional in the protocol: the server cannot say
            return None
        return tensors.ModelSignature(
            inputs={spec.name: spec for spec in map(_metadata_spec, inputs)},
            outputs={spec.name: spec for spec in map(_metadata_spec, outputs)},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        # what the server sent is not repeated (see check_ready): only that it was wrong
        log.warning("unreadable V2 metadata for %r from %s: %.500r", model, base_url, response.text)
        raise PermanentError(
            f"unreadable metadata for model {model!r} on {base_url} "
            "(not V2 model metadata; the server's answer is in the replica's log)"
        ) from None


def _metadata_spec(tensor: dict[str, Any]) -> tensors.TensorSpec:
    """One tensor of V2 metadata; names are plain identifiers, dims integers, or ValueError.

    A name is the one thing from a server's answer that may reach a status message
    (a mapping that does not fit says what the model has), so it must look like one.
    """
    name, shape = tensor["name"], tensor.get("shape")
    if not isinstance(name, str) or not _TENSOR_NAME.fullmatch(name):
        raise ValueError("not a tensor name")
    dims = tuple(_dim(d) for d in shape) if isinstance(shape, list) else None
    dtype = wire.FROM_V2.get(str(tensor.get("datatype", "")), "")
    return tensors.TensorSpec(name, dtype, dims)


def _dim(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("not a dimension")
    return value


def explain_url(base_url: str, model: str) -> str:
    """A KServe V1 explainer's ``:explain`` URL, the model name quoted as in :func:`endpoints`."""
    predict, _ = endpoints(V1, base_url, model)
    return predict.removesuffix(":predict") + ":explain"


class InferenceClient:
    """One served model: named arrays in, named arrays out, batched and concurrent.

    ``signature`` is what the server's metadata says (V2), or None (V1); input and
    output names that are the mapping's ``ONLY`` ("") mean the model's only tensor,
    sent as plain rows (V1) or under ``input_name`` (V2).
    """

    def __init__(
        self,
        *,
        protocol: str,
        base_url: str,
        model: str,
        settings: ClientSettings,
        input_name: str = "input",
        signature: tensors.ModelSignature | None = None,
        binary: bool = False,
        v1_columnar: bool = False,
    ) -> None:
        self.protocol = protocol
        self.url, _ = endpoints(protocol, base_url, model)
        self.settings = settings
        self.input_name = input_name
        self._signature = signature
        self.binary = binary and protocol == V2
        self.v1_columnar = v1_columnar
        self.description = f"{protocol} {base_url} {model}"
        self.breaker = CircuitBreaker(
            failures=settings.breaker_failures, cooldown=settings.breaker_cooldown
        )
        self._client: httpx.AsyncClient | None = None
        self._limit: asyncio.Semaphore | None = None

    @property
    def signature(self) -> tensors.ModelSignature | None:
        return self._signature

    @property
    def remote(self) -> bool:
        return True

    @property
    def gradients(self) -> Gradients | None:
        return None  # a server answers predictions, not gradients

    def infer_blocking(
        self, inputs: Mapping[str, np.ndarray], *, loop: asyncio.AbstractEventLoop
    ) -> dict[str, np.ndarray]:
        return asyncio.run_coroutine_threadsafe(self.infer(inputs), loop).result()

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

    async def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs for every row of the batch, by output name, in order."""
        self.breaker.check()
        http = self._http()
        rows = len(next(iter(inputs.values()))) if inputs else 0
        size = self.settings.batch_size
        chunks = [
            {name: array[i : i + size] for name, array in inputs.items()}
            for i in range(0, rows, size)
        ]
        if not chunks:
            return {}
        tasks = [
            asyncio.ensure_future(self._request(http, chunk, rows=len(next(iter(chunk.values())))))
            for chunk in chunks
        ]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            # One chunk failed (the batch goes back): the others are not left running
            # between batches, calling the server and holding the concurrency slots.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return {name: np.concatenate([r[name] for r in results]) for name in results[0]}

    async def call(
        self, batch: np.ndarray, *, parse: Callable[[Any, int], T], url: str | None = None
    ) -> T:
        """One request for the whole ``batch``, to ``url`` (default: the inference URL).

        It has the retries, the concurrency limit and the circuit breaker of
        ``infer``; ``parse(body, rows)`` turns the JSON answer into the result.
        Hosted detectors (a window in, a verdict out) and explainers (``:explain``)
        answer in shapes of their own, so they bring their own ``parse``.
        """
        self.breaker.check()
        result: T = await self._request(
            self._http(), {tensors.ONLY: batch}, rows=len(batch), parse=parse, url=url
        )
        return result

    async def _request(
        self,
        http: httpx.AsyncClient,
        chunk: Mapping[str, np.ndarray],
        *,
        rows: int,
        parse: Callable[[Any, int], Any] | None = None,
        url: str | None = None,
    ) -> Any:
        assert self._limit is not None
        content, headers = wire.encode_request(
            self.protocol,
            chunk,
            default_name=self.input_name,
            binary=self.binary and parse is None,
            columnar=self.v1_columnar,
        )
        async with self._limit:
            for attempt in range(self.settings.retries + 1):
                try:
                    response = await http.post(url or self.url, content=content, headers=headers)
                except httpx.HTTPError as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                else:
                    if response.status_code < 400:
                        self.breaker.success()
                        if parse is not None:
                            return parse(_json(response, self.url), rows)
                        try:
                            return wire.decode_response(
                                self.protocol,
                                response.content,
                                response.headers,
                                rows=rows,
                                url=self.url,
                            )
                        except wire.WireError as exc:
                            raise PermanentError(str(exc)) from None
                    if response.status_code < 500:
                        # the body stays in the log: it is the server's text, not ours
                        log.warning(
                            "HTTP %s from %s: %s",
                            response.status_code,
                            url or self.url,
                            response.text[:500],
                        )
                        raise PermanentError(
                            f"HTTP {response.status_code} from {url or self.url} "
                            "(the server's answer is in the replica's log)"
                        )
                    failure = f"HTTP {response.status_code}"
                if attempt < self.settings.retries:
                    await asyncio.sleep(self.settings.backoff * 2**attempt)
            wait = self.breaker.failure()
            raise Backpressure(f"model server failed: {failure}", retry_after=wait)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _json(response: httpx.Response, url: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise PermanentError(f"unexpected response from {url}: {exc}") from None
