"""The ``column_inlets`` of a ``process_batch`` streamlet: its records of those inlets
decoded as columns, in one call per inlet (:class:`ColumnInlets`); see
:mod:`streamflow.api.columns`. A ``process_columns`` streamlet's batch is
:mod:`.columnar`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Message

from streamflow.api.columns import ColumnBatch, ColumnRecord, Place
from streamflow.api.streamlet import Record
from streamflow.runtime.column_coding import ColumnDecoder
from streamflow.runtime.dlq import Dead
from streamflow.runtime.ports import Bindings
from streamflow.schema.codecs import DecodeError

__all__ = ["ColumnInlets", "places_of"]


class ColumnInlets:
    """The ``column_inlets`` of a record-path streamlet: each batch's records of those
    inlets are decoded together, in one call per inlet, into columns, and their records'
    values are the rows of those columns (``columns_of`` finds the columns again).

    The processor keeps a place for each such record while it reads the batch, so the
    batch keeps its order across inlets, and :meth:`fill` puts them in. Only a topic
    with a column form (Avro) is read so: a JSON topic's records keep its codec's own
    values, and ``columns_of`` gives None for them. A record that
    does not decode is a dead letter with the reason the record path gives. Like a
    ``process_columns`` batch, these records are not counted against
    ``max_batch_bytes``: each was refused past ``max_record_bytes`` before decoding.
    """

    def __init__(self, bindings: Bindings, inlets: tuple[str, ...]) -> None:
        self.topics: dict[str, tuple[str, ColumnDecoder]] = {}
        for topic, (inlet, codec) in bindings.inlets_by_topic.items():
            decoder = ColumnDecoder(codec)
            if inlet in inlets and decoder.columnar:
                self.topics[topic] = (inlet, decoder)

    def fill(
        self,
        records: list[Record | None],
        messages: list[Message],
        places: list[int],
        dead: list[Dead],
    ) -> tuple[list[Record], list[Message]]:
        """``records`` with each of ``places`` (a place held for a column inlet's record,
        whose message is ``messages`` at that place) filled, or dropped as a dead letter;
        and their messages. Raises RegistryUnavailable: the batch backs off."""
        by_topic: dict[str, list[int]] = {}
        for place in places:
            topic: str = messages[place].topic()  # type: ignore[assignment]
            by_topic.setdefault(topic, []).append(place)
        for topic, at in by_topic.items():
            inlet, decoder = self.topics[topic]
            columns = decoder.decode([messages[i].value() or b"" for i in at])
            for index, reason in columns.errors:
                dead.append((messages[at[index]], inlet, DecodeError(reason), "decode"))
            read = [messages[at[i]] for i in columns.rows.tolist()]
            batch = ColumnBatch(
                inlet, columns.columns, columns.n, columns.to_records, places_of(read), _keys(read)
            )
            for row, index in enumerate(columns.rows.tolist()):
                msg = messages[at[index]]
                partition: int = msg.partition()
                records[at[index]] = ColumnRecord.of_row(
                    msg, batch, row, topic=topic, partition=partition
                )
        kept = [i for i, record in enumerate(records) if record is not None]
        return [r for r in records if r is not None], [messages[i] for i in kept]


def _keys(messages: list[Message]) -> Callable[[], list[bytes | None]]:
    """Each of ``messages``' keys, read when first asked for."""
    return lambda: [m.key() for m in messages]


def places_of(messages: list[Message]) -> Callable[[], list[Place]]:
    """Where each of ``messages`` was read, made when first asked for."""
    return lambda: [
        Place(m.key(), m.topic(), m.partition(), m.offset())  # type: ignore[arg-type]
        for m in messages
    ]
