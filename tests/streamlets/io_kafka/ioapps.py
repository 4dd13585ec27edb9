"""The built-in I/O streamlets bound to the test schemas, as a user binds them.

A blueprint (or ``iohelpers.make_app``) references these as ``ioapps:Name``;
the replica processes import this module from ``python_paths``. The schemas
live in ``schemas/`` next to this file, or, for ``Ping``, in a directory a test
writes, so nothing here is found through the project's ``schemas/``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from streamflow import Inlet, Outlet, Record, params
from streamflow.streamlets.io import FileEgress, FileIngress, Generator, HttpIngress

EVENT = "iokafka.Event"
PING = "iokafka.elsewhere.Ping"  # defined only in a directory the schema-store test writes


class EventGenerator(Generator):
    out = Outlet("out", EVENT)


class EventFile(FileIngress):
    out = Outlet("out", EVENT)


class EventHttp(HttpIngress):
    out = Outlet("out", EVENT)


class EventSink(FileEgress):
    in_ = Inlet("in", EVENT)


class SlowEventSink(EventSink):
    """Writes each batch, then dawdles before returning it, i.e. before its offsets are stored.

    The pause widens the window between "on disk" and "committed" in which a
    kill must cost duplicates, never losses.
    """

    pause = params.Duration(default="300ms", description="the wait after writing each batch")

    def process_batch(self, records: Sequence[Record]) -> list[None]:
        written = super().process_batch(records)
        time.sleep(self.pause.total_seconds())
        return written


PingGenerator = Generator.for_schema(PING, name="PingGenerator")
PingSink = FileEgress.for_schema(PING, name="PingSink")
