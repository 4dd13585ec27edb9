"""A batch's messages decoded into records: the first step of a record batch.

Records come in runs from one partition: what is per partition (its inlet, its next
offset, the count) is looked up and stored once per run, not per record, and a run's
last message gives the offset (a record reads its own lazily). A record that does not
decode is a dead letter with the reason; an unreachable schema registry is raised, for
the processor to back off (the record is fine, the registry is not). What the batch
holds decoded is bounded (``decode_limits.max_batch_bytes``): past it the batch is
cut, and the rest is read again next turn.

The records of ``column_inlets`` keep their place in the batch's order and are decoded
together once the batch is read (:class:`~streamflow.runtime.column_inlets.ColumnInlets`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import Message

from streamflow.api.streamlet import Record
from streamflow.runtime.delivery import Offsets
from streamflow.runtime.dlq import TOMBSTONE, Dead
from streamflow.runtime.ports import Bindings
from streamflow.schema.codecs import DecodeError, error_line
from streamflow.schema.registry import RegistryRefused, RegistryUnavailable

if TYPE_CHECKING:
    from streamflow.runtime.column_inlets import ColumnInlets

__all__ = ["RecordBatch", "read_records"]

log = logging.getLogger("streamflow.runtime")

Cut = Callable[[list[Message], Message, int, Offsets], tuple[list[Message], int, Message]]


@dataclass
class RecordBatch:
    """The batch's messages (fewer when it was cut), its records and their messages (two
    lists: no tuple per record), its dead letters, and where it starts and ends."""

    messages: list[Message]
    records: list[Record] = field(default_factory=list)
    decoded: list[Message] = field(default_factory=list)
    dead: list[Dead] = field(default_factory=list)
    offsets: Offsets = field(default_factory=dict)
    starts: Offsets = field(default_factory=dict)  # each partition's first offset in it
    counts: dict[str, int] = field(default_factory=dict)


def read_records(
    messages: list[Message],
    bindings: Bindings,
    *,
    cut: Cut,
    column_inlets: ColumnInlets | None = None,
) -> RecordBatch:
    """``messages`` (not empty) as records; ``cut`` ends the batch at its size bound.
    Raises RegistryUnavailable or RegistryRefused: the whole batch must wait."""
    read = RecordBatch(messages)
    offsets, starts, counts, dead = read.offsets, read.starts, read.counts, read.dead
    records, decoded = read.records, read.decoded
    keep, keep_message = records.append, decoded.append
    consumed = Record.consumed
    inlets = bindings.inlets_by_topic
    topic, partition, run, last = "", -1, 0, messages[0]
    inlet, codec = "", None
    # column inlets' records: a place is kept in the order, filled once they are decoded
    columnar, places = False, []
    column_topics = column_inlets.topics if column_inlets is not None else {}
    # what the batch holds decoded, against its limit (schema.bounds: each record's is
    # known before it is decoded, so this is the most one batch can cost)
    held, budget = 0, bindings.max_batch_bytes
    for msg in messages:
        error = msg.error()
        if error is not None:
            log.warning("consumer error: %s", error.str())
            continue
        # Without an error, librdkafka always sets topic, partition and offset
        # (the stubs say Optional; a cast per field would cost on the hot path).
        this_topic: str = msg.topic()  # type: ignore[assignment]
        this_partition: int = msg.partition()  # type: ignore[assignment]
        if this_partition != partition or this_topic != topic:
            if run:
                offsets[(topic, partition)] = last.offset() + 1  # type: ignore[operator]
                counts[inlet] = counts.get(inlet, 0) + run
            topic, partition, run = this_topic, this_partition, 0
            inlet, codec = inlets[topic]
            columnar = topic in column_topics
            starts.setdefault((topic, partition), msg.offset())  # type: ignore[arg-type]
        last = msg
        run += 1
        raw = msg.value()
        if columnar and raw is not None:
            places.append(len(records))
            keep(None)  # type: ignore[arg-type]  # filled below
            keep_message(msg)
            continue
        try:
            if raw is None:
                raise DecodeError(TOMBSTONE)
            value = codec.decode(raw)  # type: ignore[union-attr]
        except DecodeError as exc:
            dead.append((msg, inlet, exc, "decode"))
            continue
        except (RegistryUnavailable, RegistryRefused):
            raise
        except Exception as exc:  # a codec's own failure on these bytes: still this record's
            dead.append((msg, inlet, DecodeError(f"cannot decode: {error_line(exc)}"), "decode"))
            continue
        held += codec.last_size  # type: ignore[union-attr]
        if held > budget and records:
            # the rest waits for the next batch, this record with it
            read.messages, run, last = cut(messages, msg, run, starts)
            break
        keep(consumed(msg, value, inlet, topic, partition))
        keep_message(msg)
    if run:
        offsets[(topic, partition)] = last.offset() + 1  # type: ignore[operator]
        counts[inlet] = counts.get(inlet, 0) + run
    if places:
        assert column_inlets is not None
        read.records, read.decoded = column_inlets.fill(records, decoded, places, dead)  # type: ignore[arg-type]
    return read
