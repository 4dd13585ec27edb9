"""The batch of a streamlet with ``process_columns``: columns in, columns out (the
``column_inlets`` of a ``process_batch`` streamlet are :mod:`.column_inlets`').

Where the inlet's topic has a column codec (Avro: single-object or registry, see
:mod:`streamflow.schema.columns`), the batch's values are decoded in one native call
into columns, and the logic's columns are encoded back in one call: no dict per record
on the way. A topic without one (JSON, a test's strict outlet) goes record by record
through its codec into the same columns, so the logic sees one form whatever the format.

Every failure stays its record's, with the reason a per-record streamlet would give:
a record that does not decode is a dead letter before the logic; a row the logic fails
(``ColumnResult.errors``) or whose values do not fit the outlet's schema is one after.
When the logic raises, the batch is run again one row at a time, so that only the rows
that raise alone are dead letters. ``Backpressure`` and an unreachable registry leave
here for the processor, as on the record path.

Each output row keeps its input's key, and the lineage headers its input carries. A
result may write other outlets too (``ColumnResult.outlets``, a shadow model's outputs
say): their rows are written after the batch's own, and a row that fails there is
counted and logged, not a dead letter, since its input was served.

A columnar batch is not cut at ``max_batch_bytes`` as a record batch is: its numbers
take 8 bytes a value instead of a Python object each, and every record is still
refused past ``max_record_bytes`` before it is decoded, so a batch holds at most
``batch_size`` records of that size.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import Message

from streamflow.api.columns import ColumnBatch, ColumnResult
from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.streamlet import Backpressure, Streamlet
from streamflow.runtime.column_coding import ColumnDecoder, ColumnEncoder
from streamflow.runtime.column_inlets import places_of
from streamflow.runtime.delivery import Delivery, Headers, Offsets
from streamflow.runtime.dlq import TOMBSTONE, Dead
from streamflow.runtime.lineage import carried
from streamflow.runtime.ports import Bindings, OutletBinding
from streamflow.schema.codecs import DecodeError, EncodeError, error_line

__all__ = ["ColumnarBatch", "ColumnarPath", "Output"]

log = logging.getLogger("streamflow.runtime")


@dataclass
class Output:
    """One outlet's outputs of one call of the logic, a list a field (no tuple per row):
    each row's bytes, its input's key, and its headers (``shared`` when they are all the
    same, else one list each in ``headers``)."""

    outlet: OutletBinding
    values: list[bytes]
    keys: list[bytes | None]
    shared: Headers
    headers: list[Headers] | None = None


@dataclass
class ColumnarBatch:
    """One batch read: where it ends per partition, what it counts, and its columns."""

    offsets: Offsets = field(default_factory=dict)
    starts: Offsets = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    dead: list[Dead] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)  # the decoded rows' messages
    keys: list[bytes | None] = field(default_factory=list)  # and their keys
    batch: ColumnBatch | None = None
    # each row's lineage headers, once an outlet asked (None: no row carries any)
    lineage: list[Headers | None] | None = None
    lineage_read: bool = False


class ColumnarPath:
    """Reads, runs and writes the batches of one ``process_columns`` streamlet."""

    def __init__(
        self,
        *,
        streamlet: Streamlet,
        descriptor: StreamletDescriptor,
        bindings: Bindings,
        loop: asyncio.AbstractEventLoop,
        lineage: bool,
    ) -> None:
        self._logic = streamlet.process_columns  # type: ignore[attr-defined]
        self._loop = loop
        self._lineage = lineage
        self._decoders = {
            topic: (inlet, ColumnDecoder(codec))
            for topic, (inlet, codec) in bindings.inlets_by_topic.items()
        }
        self._outlets = bindings.outlets
        self._outlet: OutletBinding = bindings.outlets[descriptor.columns_outlet]
        self._encoders = {self._outlet.outlet: ColumnEncoder(self._outlet.codec)}

    # -- reading -----------------------------------------------------------------

    def read(self, messages: list[Message]) -> ColumnarBatch:
        """The batch's positions and its decoded columns (records that do not decode are
        dead letters already)."""
        read = ColumnarBatch()
        values: list[bytes] = []
        kept: list[Message] = []
        topic, partition, last = "", -1, None
        inlet, decoder = "", None
        for msg in messages:
            if msg.error() is not None:
                log.warning("consumer error: %s", msg.error().str())  # type: ignore[union-attr]
                continue
            this_topic: str = msg.topic()  # type: ignore[assignment]
            this_partition: int = msg.partition()  # type: ignore[assignment]
            if this_partition != partition or this_topic != topic:
                if last is not None:
                    read.offsets[(topic, partition)] = last.offset() + 1  # type: ignore[operator]
                topic, partition = this_topic, this_partition
                inlet, decoder = self._decoders[topic]
                read.starts.setdefault((topic, partition), msg.offset())  # type: ignore[arg-type]
            last = msg
            read.counts[inlet] = read.counts.get(inlet, 0) + 1
            raw = msg.value()
            if raw is None:
                read.dead.append((msg, inlet, DecodeError(TOMBSTONE), "decode"))
                continue
            values.append(raw)
            kept.append(msg)
        if last is not None:
            read.offsets[(topic, partition)] = last.offset() + 1  # type: ignore[operator]
        if decoder is None:
            return read
        columns = decoder.decode(values)  # may raise RegistryUnavailable: the batch backs off
        for index, reason in columns.errors:
            read.dead.append((kept[index], inlet, DecodeError(reason), "decode"))
        read.messages = [kept[i] for i in columns.rows.tolist()]
        read.keys = list(map(Message.key, read.messages))
        read.batch = ColumnBatch(
            inlet,
            columns.columns,
            columns.n,
            columns.to_records,
            places_of(read.messages),
            _copied(read.keys),  # the logic's own list: the outputs' keys stay ours
        )
        return read

    # -- the logic, and its outputs ----------------------------------------------

    def run(self, read: ColumnarBatch) -> list[Output]:
        """The batch's outputs, each with its input's message and its headers; rows that
        fail are added to ``read.dead``. Raises only ``Backpressure``."""
        batch = read.batch
        if batch is None or not batch.n:
            return []
        try:
            return self._written(read, batch, list(range(batch.n)), self._call(batch))
        except Backpressure:
            raise
        except Exception as exc:
            log.warning(
                "process_columns raised on a batch of %d (%s); running it row by row to "
                "find the rows that fail",
                batch.n,
                error_line(exc),
            )
        out: list[Output] = []
        for row in range(batch.n):
            try:
                out += self._written(read, batch, [row], self._call(batch.take([row])))
            except Backpressure:
                raise
            except Exception as exc:
                read.dead.append((read.messages[row], batch.inlet, exc, "logic"))
        return out

    def _call(self, batch: ColumnBatch) -> ColumnResult:
        result = self._logic(batch)
        if asyncio.iscoroutine(result):
            result = self._loop.run_until_complete(result)
        if isinstance(result, ColumnResult):
            return result
        if isinstance(result, Mapping):
            return ColumnResult(result)
        raise TypeError(
            f"process_columns returned a {type(result).__name__}; return a mapping of "
            "columns or a ColumnResult"
        )

    def _written(
        self, read: ColumnarBatch, batch: ColumnBatch, rows: list[int], result: ColumnResult
    ) -> list[Output]:
        """The outputs of ``result`` (run on ``rows`` of the batch): the batch's outlet's,
        whose failed rows are dead letters, then the other outlets' it names."""
        out = self._encoded(read, batch, rows, result, self._outlet)
        for name, side in result.outlets.items():
            outlet = self._outlets.get(name)
            if outlet is None or outlet.outlet == self._outlet.outlet:
                raise ValueError(
                    f"process_columns wrote outlet {name!r}: use one of the streamlet's other "
                    f"outlets ({', '.join(o for o in self._outlets if o != self._outlet.outlet)})"
                )
            out += self._encoded(read, batch, rows, side, outlet)
        return out

    def _encoded(
        self,
        read: ColumnarBatch,
        batch: ColumnBatch,
        rows: list[int],
        result: ColumnResult,
        outlet: OutletBinding,
    ) -> list[Output]:
        n = len(rows)
        for name, column in result.columns.items():
            if len(column) != n:
                raise ValueError(
                    f"process_columns returned column {name!r} with {len(column)} rows "
                    f"for a batch of {n}"
                )
        failed = dict(result.errors)
        encoder = self._encoders.get(outlet.outlet)
        if encoder is None:
            encoder = self._encoders[outlet.outlet] = ColumnEncoder(outlet.codec)
        encoded, errors = encoder.encode(result.columns, n)
        for index, reason in errors:
            failed.setdefault(index, EncodeError(reason))
        headers: Headers = [("streamflow-schema", outlet.schema_header)]
        by_row: list[tuple[str, Any]] = []
        for key, value in result.headers.items():
            if isinstance(value, str | bytes):
                headers.append((key, _bytes(value)))
            elif len(value) != n:
                raise ValueError(
                    f"process_columns returned header {key!r} with {len(value)} values "
                    f"for a batch of {n}"
                )
            else:
                by_row.append((key, value))
        # None: every row of the batch, in order (``rows`` is then ``range(n)``)
        every = None if len(rows) == len(read.messages) else rows
        keys = read.keys if every is None else [read.keys[r] for r in every]
        row_headers = _row_headers(headers, by_row) if by_row else None
        lineage = self._lineage_of(read)
        if lineage is not None:
            mine = lineage if every is None else [lineage[r] for r in every]
            row_headers = [
                found + carried if carried else found
                for found, carried in zip(
                    row_headers or itertools.repeat(headers, n), mine, strict=False
                )
            ]
        values: list[bytes] = encoded  # type: ignore[assignment]  # None only where failed
        if failed or None in encoded:
            values, keys, row_headers = self._failed(
                read, batch, rows, outlet, (encoded, keys, row_headers), failed
            )
        return [Output(outlet, values, keys, headers, row_headers)]

    def _failed(
        self,
        read: ColumnarBatch,
        batch: ColumnBatch,
        rows: list[int],
        outlet: OutletBinding,
        outputs: tuple[list[bytes | None], list[bytes | None], list[Headers] | None],
        failed: dict[int, BaseException],
    ) -> tuple[list[bytes], list[bytes | None], list[Headers] | None]:
        """The outputs less the rows that failed: dead letters of the batch's outlet,
        counted and logged for another (their inputs were served)."""
        encoded, keys, row_headers = outputs
        failed = {index: why for index, why in failed.items() if 0 <= index < len(encoded)}
        for index, data in enumerate(encoded):
            if data is None:
                failed.setdefault(index, EncodeError("not encoded"))
        if not failed:  # errors only of rows the batch does not have
            return encoded, keys, row_headers  # type: ignore[return-value]
        if outlet is not self._outlet:
            log.warning(
                "%d of %d rows for outlet %s were not written (not dead letters: their "
                "inputs were served); the first: %s",
                len(failed),
                len(rows),
                outlet.outlet,
                failed[min(failed)],
            )
        else:
            for index in sorted(failed):
                problem = failed[index]
                stage = "encode" if isinstance(problem, EncodeError) else "logic"
                read.dead.append((read.messages[rows[index]], batch.inlet, problem, stage))
        kept = [i for i in range(len(encoded)) if i not in failed]
        return (
            [encoded[i] for i in kept],  # type: ignore[misc]
            [keys[i] for i in kept],
            None if row_headers is None else [row_headers[i] for i in kept],
        )

    def _lineage_of(self, read: ColumnarBatch) -> list[Headers | None] | None:
        """Each row's lineage headers, read once a batch for all its outlets; None when
        lineage is off or no row carries any."""
        if not self._lineage:
            return None
        if not read.lineage_read:
            found = [
                carried(consumed) if consumed is not None and len(consumed) > 1 else None
                for consumed in map(Message.headers, read.messages)
            ]
            read.lineage = found if any(found) else None
            read.lineage_read = True
        return read.lineage

    def produce(self, delivery: Delivery, outputs: list[Output]) -> dict[str, int]:
        """Write the outputs to their outlets' topics; how many went to each outlet."""
        produced: dict[str, int] = {}
        direct = delivery.direct_produce()
        for output in outputs:
            name = output.outlet.outlet
            produced[name] = produced.get(name, 0) + len(output.values)
            topic = output.outlet.topic
            if topic is None:  # an unconnected outlet: counted, not written
                continue
            every = output.headers or itertools.repeat(output.shared)
            for data, key, headers in zip(output.values, output.keys, every, strict=False):
                try:
                    direct(topic, data, key, headers=headers)
                except BufferError:  # the queue is full: the delivery waits for room
                    delivery.produce(topic, data, key, headers)
        return produced


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _row_headers(headers: Headers, by_row: list[tuple[str, Any]]) -> list[Headers]:
    """Each row's headers: ``headers`` and its values of ``by_row`` (a header whose
    value is None is left out); one list per combination of values, a batch has few."""
    columns = [
        values.tolist() if isinstance(values, np.ndarray) else list(values) for _, values in by_row
    ]
    found: list[Any] = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
    variants: dict[Any, Headers] = {}
    for combination in dict.fromkeys(found):
        values = (combination,) if len(columns) == 1 else combination
        variants[combination] = headers + [
            (key, _bytes(value))
            for (key, _), value in zip(by_row, values, strict=True)
            if value is not None  # a row without this header
        ]
    return [variants[combination] for combination in found]


def _copied(keys: list[bytes | None]) -> Callable[[], list[bytes | None]]:
    """A copy of ``keys`` each time it is asked for."""
    return lambda: list(keys)
