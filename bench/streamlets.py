"""The passthrough streamlets the benchmark runs through the real runtime.

Each returns the decoded value unchanged, so everything measured is the runtime's
own work: consume, decode, route, encode, produce, delivery tracking and offsets.
The variants show what the per-record ``process`` path costs over ``process_batch``,
and what columns (``process_columns``, the native codec) save over both.
"""

from __future__ import annotations

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet
from streamflow.api.columns import ColumnBatch

SCHEMA = "bench.PassRecord"


class PassBatch(Streamlet):
    """Passthrough through ``process_batch``: one call per consumed batch."""

    inp = Inlet("in", SCHEMA)
    out = Outlet("out", SCHEMA)

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        return [record.value for record in records]


class PassRecord(Streamlet):
    """Passthrough through ``process``: one call per record."""

    inp = Inlet("in", SCHEMA)
    out = Outlet("out", SCHEMA)

    def process(self, record: Record) -> dict[str, Any]:
        return record.value


class PassColumns(Streamlet):
    """Passthrough through ``process_columns``: the batch's columns back as they came."""

    inp = Inlet("in", SCHEMA)
    out = Outlet("out", SCHEMA)

    def process_columns(self, batch: ColumnBatch) -> ColumnBatch:
        return batch


class PassTimed(Streamlet):
    """The ``PassBatch`` passthrough for the latency probe's records (``bench.TimedRecord``)."""

    inp = Inlet("in", "bench.TimedRecord")
    out = Outlet("out", "bench.TimedRecord")

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        return [record.value for record in records]
