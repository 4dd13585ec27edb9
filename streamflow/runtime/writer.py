"""What logic returned, as the records Kafka is given: one place for every loop.

A processor's batch, a source, a ``serve()`` push and a control reaction each
produce through a delivery of their own (a batch's transaction, a chunk, an
acknowledgement per push, a transaction of its own), but what they write is
the same: each routed output's topic, its value in the outlet's codec, its key,
and its headers. The headers are the schema header first, then the ``Emit``'s
own, then the lineage carried from the input. Written once here, so the loops
cannot drift apart (the ``serve()`` path once dropped an ``Emit``'s headers).

A result's outputs are encoded before any is returned: one that cannot be
encoded fails them all, so a record is never half written.

A record batch's results are produced by :class:`BatchWriter`, whose fast path (a
plain dict for the only outlet, the input's key kept) skips the router for speed; it
takes its headers from :meth:`OutputWriter.schema_headers`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from confluent_kafka import Message

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.outputs import OutputRouter
from streamflow.api.streamlet import Record
from streamflow.runtime.delivery import Delivery, Headers
from streamflow.runtime.lineage import carried
from streamflow.runtime.ports import Bindings, OutletBinding

__all__ = ["BatchWriter", "HeaderCache", "OutputWriter", "Written"]


class Written(NamedTuple):
    """One output, ready for the producer; ``topic`` None: the outlet writes nowhere
    (it is counted, not produced)."""

    outlet: str
    topic: str | None
    value: bytes
    key: bytes | None
    headers: Headers


class HeaderCache:
    """Logic usually shares one headers dict across a batch's outputs: encoded once.

    One per batch, never longer: the results of a batch are all made before any is
    written, so a dict they share has one content then; a later batch may change it.
    """

    def __init__(self) -> None:
        self._last: Any = None
        self._encoded: Headers = []

    def encoded(self, headers: Mapping[str, str]) -> Headers:
        if headers is not self._last:
            self._last = headers
            self._encoded = [(k, v.encode()) for k, v in headers.items()]
        return self._encoded


class OutputWriter:
    """Routes, encodes and heads one streamlet's outputs; build it once per replica."""

    def __init__(self, descriptor: StreamletDescriptor, bindings: Bindings) -> None:
        self.router = OutputRouter(descriptor)
        self._outlets = bindings.outlets

    def schema_headers(self, binding: OutletBinding) -> Headers:
        """The headers every record of an outlet carries: its schema."""
        return [("streamflow-schema", binding.schema_header)]

    def records(
        self,
        result: Any,
        *,
        input_key: str | None,
        lineage: Callable[[], Headers | None] | None = None,
        cache: HeaderCache | None = None,
    ) -> list[Written]:
        """Every output in ``result``, in order. ``input_key`` is the key an output keeps
        unless it says otherwise; ``lineage`` gives the input's headers to carry, asked
        only when there is an output; ``cache``, the batch's. Routing or encoding errors
        raise before anything is returned."""
        encoded = [
            (binding, out, binding.codec.encode(out.value))
            for out in self.router.route(result, input_key=input_key)
            for binding in (self._outlets[out.outlet],)
        ]
        carried = lineage() if encoded and lineage is not None else None
        cache = cache or HeaderCache()
        written: list[Written] = []
        for binding, out, data in encoded:
            headers = self.schema_headers(binding)
            if out.headers:
                headers += cache.encoded(out.headers)
            if carried:
                headers += carried
            key = out.key.encode() if out.key is not None else None
            written.append(Written(binding.outlet, binding.topic, data, key, headers))
        return written


class BatchWriter:
    """Produces a record batch's results: a plain dict for the only outlet (the common
    case) straight to the producer, anything else through :class:`OutputWriter`."""

    def __init__(
        self,
        writer: OutputWriter,
        descriptor: StreamletDescriptor,
        bindings: Bindings,
        delivery: Delivery,
        *,
        lineage: bool,
    ) -> None:
        self._writer = writer
        self.delivery = delivery
        self._lineage = lineage
        self._fast = _fast_outlet(descriptor, bindings)
        self._fast_headers: Headers = writer.schema_headers(self._fast) if self._fast else []

    def write(
        self,
        messages: list[Message],
        records: list[Record],
        results: Sequence[Any],
        dead: list[tuple[Message, str, BaseException, str]],
    ) -> dict[str, int]:
        """Produce each record's results (``results[i]`` is ``records[i]``'s, consumed as
        ``messages[i]``); a result that is an exception, or whose outputs do not encode, is
        added to ``dead`` instead. How many outputs went to each outlet."""
        produced: dict[str, int] = {}
        produce = self.delivery.produce
        records_of = self._writer.records
        cache = HeaderCache()
        fast = self._fast
        fast_count = 0
        # Reading a consumed record's headers costs up to a microsecond (librdkafka parses
        # them, the client builds Python objects): done only where lineage is carried.
        lineage_on = self._lineage
        if fast is not None:
            fast_encode, fast_topic = fast.codec.encode, fast.topic
            fast_headers = self._fast_headers
            # the producer's own produce, without the delivery's wrapper call per record
            direct = self.delivery.direct_produce()
        for msg, record, result in zip(messages, records, results, strict=True):
            if fast is not None and type(result) is dict:
                # The common case: one record for the only outlet, the input's key kept.
                try:
                    data = fast_encode(result)
                except Exception as exc:
                    dead.append((msg, record.inlet, exc, "encode"))
                    continue
                fast_count += 1
                if fast_topic is not None:
                    # a scored record's run and row go with its output (runtime/lineage.py);
                    # they are two headers, so a record with fewer has none to carry
                    consumed_headers = msg.headers() if lineage_on else None
                    lineage = (
                        carried(consumed_headers)
                        if consumed_headers is not None and len(consumed_headers) > 1
                        else None
                    )
                    headers = fast_headers if lineage is None else fast_headers + lineage
                    try:
                        direct(fast_topic, data, msg.key(), headers=headers)
                    except BufferError:  # the queue is full: the delivery waits for room
                        produce(fast_topic, data, msg.key(), headers)
                continue
            if isinstance(result, BaseException):
                dead.append((msg, record.inlet, result, "logic"))
                continue
            try:
                written = records_of(
                    result,
                    input_key=record.key,
                    lineage=_lineage_of(msg) if lineage_on else None,
                    cache=cache,
                )
            except Exception as exc:
                dead.append((msg, record.inlet, exc, "encode"))
                continue
            for out in written:
                produced[out.outlet] = produced.get(out.outlet, 0) + 1
                if out.topic is not None:
                    produce(out.topic, out.value, out.key, out.headers)
        if fast_count:
            assert fast is not None
            produced[fast.outlet] = produced.get(fast.outlet, 0) + fast_count
        return produced


def _lineage_of(msg: Message) -> Callable[[], Headers | None]:
    """The input's lineage headers, read only when the writer has an output to give them."""
    return lambda: carried(msg.headers())


def _fast_outlet(descriptor: StreamletDescriptor, bindings: Bindings) -> OutletBinding | None:
    """The outlet a plain dict result goes to unchanged, when there is exactly one and
    it has no key function (so the input's key bytes are kept as they are)."""
    if len(descriptor.outlets) != 1:
        return None
    port = descriptor.outlets[0]
    if port.keyed:
        return None
    return bindings.outlets[port.name]
