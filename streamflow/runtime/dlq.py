"""Dead letters: the original bytes plus headers that say what went wrong and where.

A dead letter keeps the record's key, value and headers exactly as consumed,
so it can be inspected with ``streamflow tail`` and replayed after a fix.
"""

from __future__ import annotations

from confluent_kafka import Message

__all__ = ["TOMBSTONE", "Dead", "dead_letter", "describe"]

#: a dead letter on its way: (the message, its inlet, the error, the stage: "decode"...)
Dead = tuple[Message, str, BaseException, str]
#: why a record with no value is one, on every path
TOMBSTONE = "record has no value (a tombstone)"

_MAX_ERROR = 2000


def describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…"


def dead_letter(
    msg: Message, error: BaseException
) -> tuple[bytes, bytes | None, list[tuple[str, str | bytes | None]]]:
    headers: list[tuple[str, str | bytes | None]] = list(msg.headers() or ())  # type: ignore[arg-type]
    headers += [
        ("streamflow-error", describe(error).encode()),
        ("streamflow-error-type", type(error).__name__.encode()),
        ("streamflow-source-topic", str(msg.topic()).encode()),
        ("streamflow-source-partition", str(msg.partition()).encode()),
        ("streamflow-source-offset", str(msg.offset()).encode()),
    ]
    return msg.value() or b"", msg.key(), headers
