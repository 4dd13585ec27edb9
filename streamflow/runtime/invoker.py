"""The streamlet's logic, called for one batch of decoded records: one result per record.

A streamlet's logic comes in four shapes (``process`` per record, ``process_batch``,
an ``async`` ``process``, and ``process`` over state stores); the processor needs
one: a list of records in, one result per record out, in order, where a record
whose logic raised has its exception as its result (it becomes a dead letter and
the rest of the batch carries on). ``Backpressure`` is the one exception that
leaves: the whole batch is handed back and retried.

When ``process_batch`` raises, the poison records are isolated by running the
batch again one record at a time. With state stores, a call that raised keeps
nothing it wrote: the batch's state is rolled back, or the record's savepoint
undone. Results that are iterators (a generator) are run here, so what they
raise is their record's too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from streamflow.api import outputs as outputs_mod
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Backpressure, Logic, Record, Streamlet
from streamflow.runtime.state.manager import StateManager

__all__ = ["Invoker"]

log = logging.getLogger("streamflow.runtime")


class Invoker:
    """Calls one streamlet's logic on a batch; see the module docstring."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        descriptor: StreamletDescriptor,
        router: outputs_mod.OutputRouter,
        loop: asyncio.AbstractEventLoop,
        state: StateManager | None,
    ) -> None:
        self._streamlet = streamlet
        self._descriptor = descriptor
        self._loop = loop
        self._state = state
        self._router = router  # what checks a process_batch result's length
        self._call = self._choose()

    def __call__(self, records: list[Record]) -> Sequence[Any]:
        """One result per record, in order; raises only ``Backpressure``."""
        return self._call(records)

    def _choose(self) -> Callable[[list[Record]], Sequence[Any]]:
        method = getattr(self._streamlet, self._descriptor.logic)
        if self._descriptor.logic == Logic.PROCESS_BATCH:
            return lambda records: self._batch_logic(method, records)
        if self._descriptor.is_async:
            return lambda records: self._async_record_logic(method, records)
        state = self._state
        if state is not None:
            return lambda records: _stateful_record_logic(method, records, state)
        return lambda records: _record_logic(method, records)

    def _batch_logic(self, method: Callable[..., Any], records: list[Record]) -> Sequence[Any]:
        try:
            return self._checked_batch(method, records)
        except Backpressure:
            raise
        except outputs_mod.OutputError as exc:
            # A broken contract (a result of the wrong length), not a poison record:
            # re-running one by one could hide it, so the whole batch is dead-lettered.
            if self._state is not None:
                self._state.rollback()  # and nothing it wrote is kept
            return [exc] * len(records)
        except Exception as exc:
            state = self._state
            if state is not None:
                state.rollback()  # a call that raised keeps nothing; re-run, records write again
            if len(records) == 1:
                return [exc]
            # Isolate the poison record(s): re-run one by one, so the rest still flows.
            log.warning("process_batch failed on %d records (%s); isolating", len(records), exc)
            out: list[Any] = []
            for record in records:
                if state is not None:
                    state.savepoint()
                try:
                    out.extend(self._checked_batch(method, [record]))
                except Backpressure:
                    raise
                except Exception as single:
                    if state is not None:
                        state.undo()
                    out.append(single)
            return out

    def _checked_batch(self, method: Callable[..., Any], records: list[Record]) -> Sequence[Any]:
        result = method(records)
        if asyncio.iscoroutine(result):
            result = self._loop.run_until_complete(result)
        return _materialised(self._router.batch_results(result, len(records)))

    def _async_record_logic(
        self, method: Callable[..., Any], records: list[Record]
    ) -> Sequence[Any]:
        async def all_records() -> list[Any]:
            return await asyncio.gather(*(method(r) for r in records), return_exceptions=True)

        results = self._loop.run_until_complete(all_records())
        for result in results:
            if isinstance(result, Backpressure):
                raise result
        return _materialised(results)


def _record_logic(method: Callable[[Record], Any], records: list[Record]) -> list[Any]:
    results: list[Any] = []
    append = results.append
    for record in records:
        try:
            result = method(record)
            if type(result) is not dict and isinstance(result, Iterator):
                # run a generator's body now, so its exceptions count as the logic's
                result = list(result)
            append(result)
        except Backpressure:
            raise
        except Exception as exc:
            append(exc)
    return results


def _stateful_record_logic(
    method: Callable[[Record], Any], records: list[Record], state: StateManager
) -> list[Any]:
    """:func:`_record_logic`, where a record whose logic raises leaves no state written
    (apart from it, so that a stateless streamlet pays nothing per record for this)."""
    results: list[Any] = []
    for record in records:
        state.savepoint()
        try:
            result = method(record)
            if type(result) is not dict and isinstance(result, Iterator):
                result = list(result)
            results.append(result)
        except Backpressure:
            raise
        except Exception as exc:
            state.undo()
            results.append(exc)
    return results


_PLAIN = {dict, type(None)}


def _materialised(results: Sequence[Any]) -> Sequence[Any]:
    """Results with every iterator (a generator, say) run to a list; one that raises
    becomes that record's exception, as when ``process`` itself raises."""
    kinds = set(map(type, results))  # at C speed: the per-record check is per type
    if kinds <= _PLAIN or not any(issubclass(kind, Iterator) for kind in kinds):
        return results
    out: list[Any] = []
    for result in results:
        if type(result) is not dict and isinstance(result, Iterator):
            try:
                result = list(result)
            except Backpressure:
                raise
            except Exception as exc:
                result = exc
        out.append(result)
    return out
