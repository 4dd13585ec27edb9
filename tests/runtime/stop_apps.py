"""Streamlets for the tests of a broker that goes away: each keeps writing until stopped.

``Paced`` is a ``source()``; ``PacedScale`` a processor; ``Pushes`` a ``serve()``
that emits on its own; and ``ReadingsOverHttp`` the built-in HTTP ingress bound to
the readings' schema.
They write ``tests.runtime.Reading`` records keyed ``r<seq>``, so what a topic
holds afterwards can be counted id by id.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from typing import Any

from apps import Scale  # tests/runtime/apps.py: the replicas' python path is this folder

from streamflow import EmitError, Emitter, Outlet, Record, Streamlet, params
from streamflow.streamlets.io.http import HttpIngress


def reading(seq: int) -> dict[str, Any]:
    return {"id": f"r{seq}", "seq": seq, "value": float(seq), "poison": False}


class Paced(Streamlet):
    """Readings r0, r1, ... at ``rate`` a second, without end."""

    out = Outlet("out", "tests.runtime.Reading", key=lambda r: r["id"])
    rate = params.Float(default=1000.0, min=1.0)

    def source(self) -> Iterator[dict[str, Any]]:
        start = time.monotonic()
        for seq in itertools.count():
            due = start + seq / self.rate
            if (ahead := due - time.monotonic()) > 0:
                time.sleep(ahead)  # the pace of the source, not a wait of the test's
            yield reading(seq)


class PacedScale(Scale):
    """``Scale``, taking at most ``rate`` records a second.

    At full speed a processor can take every record it has fetched and wait on the next
    fetch, so a broker killed at that moment strands nothing (seen once in CI: killed
    0.4 s after the group formed, the replica wrote nothing more). At this pace its
    fetched input always runs ahead of it, and records reach the producer after the kill.
    """

    rate = params.Float(default=2000.0, min=1.0)

    def process(self, record: Record) -> dict[str, Any]:
        time.sleep(1 / self.rate)  # the pace of the processor, not a wait of the test's
        return super().process(record)


class Pushes(Streamlet):
    """A ``serve()`` that emits readings ``rate`` a second, each awaited (as an HTTP
    ingress awaits the records of a request); one Kafka does not take is skipped."""

    out = Outlet("out", "tests.runtime.Reading", key=lambda r: r["id"])
    rate = params.Float(default=100.0, min=1.0)

    async def serve(self, emitter: Emitter) -> None:
        for seq in itertools.count():
            try:
                await emitter.emit(reading(seq), timeout=5.0)
            except EmitError as exc:
                self.context.logger.warning("r%d not written: %s", seq, exc)
            await asyncio.sleep(1 / self.rate)


class ReadingsOverHttp(HttpIngress):
    out = Outlet("out", "tests.runtime.Reading")
