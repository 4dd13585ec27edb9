"""Calling streamlet logic that may be sync or ``async``, from synchronous code.

A streamlet author picks ``def`` or ``async def`` for each method, and the
caller (the Kafka runtime, the testkit) must not care. Both callers are
synchronous loops that own one event loop per replica and drive it with
``run_until_complete``: the loop persists across calls, so clients that a
streamlet opens in an async ``setup`` stay bound to it for ``process``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

__all__ = [
    "SourceExhausted",
    "SourceTimeout",
    "call_maybe_async",
    "close_source",
    "iterate_source",
    "next_item",
    "open_source",
    "resolve",
]


class SourceTimeout(TimeoutError):
    """An async source that produced nothing within the allowed time."""


class SourceExhausted(Exception):
    """The source has no more items."""


def resolve(value: Any, *, loop: asyncio.AbstractEventLoop) -> Any:
    """``value`` itself, or what it evaluates to when it is awaitable."""
    if inspect.isawaitable(value):
        return loop.run_until_complete(_await(value))
    return value


def call_maybe_async(
    function: Callable[..., Any], /, *args: Any, loop: asyncio.AbstractEventLoop
) -> Any:
    """Call a sync or async function and return its result."""
    return resolve(function(*args), loop=loop)


def open_source(source: Any) -> Iterator[Any] | AsyncIterator[Any]:
    """What ``source()`` returned, checked: a (sync) iterable or an async iterator."""
    if isinstance(source, AsyncIterator):
        return source
    if inspect.iscoroutine(source):
        source.close()
        raise TypeError("source() must be a generator or an async generator, not a coroutine")
    try:
        items: Iterator[Any] = iter(source)
    except TypeError:
        raise TypeError(
            f"source() returned a {type(source).__name__}; it must be a generator "
            "or an async generator of outputs"
        ) from None
    return items


def next_item(
    items: Iterator[Any] | AsyncIterator[Any],
    *,
    loop: asyncio.AbstractEventLoop,
    timeout: float | None = None,
) -> Any:
    """The next item; :class:`SourceExhausted` at the end.

    ``timeout`` bounds the wait of an async source (a sync one cannot be
    interrupted); :class:`SourceTimeout` says it ran out.
    """
    if not isinstance(items, AsyncIterator):
        try:
            return next(items)
        except StopIteration:
            raise SourceExhausted from None
    try:
        return loop.run_until_complete(asyncio.wait_for(anext(items), timeout))
    except StopAsyncIteration:
        raise SourceExhausted from None
    except TimeoutError:
        raise SourceTimeout(f"source() produced nothing within {timeout:g}s") from None


def iterate_source(
    source: Any, *, loop: asyncio.AbstractEventLoop, timeout: float | None = None
) -> Iterator[Any]:
    """The items of what ``source()`` returned, sync or async, as one iterator."""
    items = open_source(source)
    while True:
        try:
            yield next_item(items, loop=loop, timeout=timeout)
        except SourceExhausted:
            return


def close_source(
    items: Iterator[Any] | AsyncIterator[Any], *, loop: asyncio.AbstractEventLoop
) -> None:
    """Let a generator run its ``finally`` blocks (sync ``close``, async ``aclose``)."""
    closer = getattr(items, "aclose", None) or getattr(items, "close", None)
    if closer is not None:
        resolve(closer(), loop=loop)


async def _await(value: Any) -> Any:
    return await value
