"""Calling a streamlet's data logic for a batch: one result, or one exception, per record.

This mirrors how the runtime calls logic, so the harness isolates failures the
same way: a record whose ``process`` raises fails alone; ``async`` records of a
batch run concurrently; a ``process_batch`` that raises is re-run record by
record to find the poison record. A returned generator is run to completion
here, so an exception it raises counts as the logic's, not as a routing error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

from streamflow.api import aio, outputs
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Record, Streamlet

__all__ = ["LogicCaller", "materialise"]


def materialise(result: Any) -> Any:
    """A returned generator (or other iterator) as a list; anything else as it is."""
    return list(result) if isinstance(result, Iterator) else result


class LogicCaller:
    """Calls ``process`` or ``process_batch`` of one streamlet on its event loop."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        descriptor: StreamletDescriptor,
        router: outputs.OutputRouter,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._method: Callable[..., Any] = getattr(streamlet, descriptor.logic)
        self._batched = descriptor.logic == "process_batch"
        self._async = descriptor.is_async
        self._router = router
        self._loop = loop

    def __call__(self, records: list[Record]) -> list[Any]:
        """One result (or the exception it raised) per record, in order.

        :class:`~streamflow.api.outputs.OutputError` (a broken contract) is raised.
        """
        if self._batched:
            return self._call_batch(records)
        if self._async:
            return self._loop.run_until_complete(_gather(self._method, records))
        return [self._call_one(record) for record in records]

    def _call_one(self, record: Record) -> Any:
        try:
            return materialise(self._method(record))
        except Exception as exc:
            return exc

    def _call_batch(self, records: list[Record]) -> list[Any]:
        try:
            return self._batch_once(records)
        except outputs.OutputError:
            raise
        except Exception as exc:
            if len(records) == 1:
                return [exc]
        # Isolate the poison record(s): re-run one by one, so the rest still flows.
        isolated: list[Any] = []
        for record in records:
            try:
                isolated += self._batch_once([record])
            except outputs.OutputError:
                raise
            except Exception as exc:
                isolated.append(exc)
        return isolated

    def _batch_once(self, records: list[Record]) -> list[Any]:
        result = aio.call_maybe_async(self._method, records, loop=self._loop)
        results = self._router.batch_results(result, len(records))
        return [materialise(r) for r in results]


async def _gather(method: Callable[..., Any], records: list[Record]) -> list[Any]:
    async def one(record: Record) -> Any:
        return materialise(await method(record))

    return list(await asyncio.gather(*(one(r) for r in records), return_exceptions=True))
