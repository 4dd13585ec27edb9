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

The processor's fast path (a plain dict for the only outlet, the input's key
kept) skips the router for speed; it takes its headers from :meth:`schema_headers`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.outputs import OutputRouter
from streamflow.runtime.delivery import Headers
from streamflow.runtime.ports import Bindings, OutletBinding

__all__ = ["HeaderCache", "OutputWriter", "Written"]


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
