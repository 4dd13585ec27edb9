"""Dead letters of writer schemas a port cannot read, counted by schema.

When another team's producer registers a schema our reader cannot read, every
record it writes is dead-lettered, and a burst of dead letters alone does not
say why. These metrics do: a counter per (port, subject, version, schema id),
and beside it an info series with the writer's name and the reasons, so that
``status``, the web view and any Prometheus query name the schema and what is
wrong with it, from the ``/metrics`` every replica already serves.

Labels are bounded: a port tracks the first :data:`MAX_WRITERS_PER_PORT`
writer schemas it sees; the dead letters of any later one are summed in one
series labelled ``other``. The reasons of a schema id are fixed (the reader
and the writer are), so its info series never churns.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Info

from streamflow.schema.registry import UnreadableWriter

__all__ = [
    "BY_WRITER",
    "MAX_REASON_CHARS",
    "MAX_WRITERS_PER_PORT",
    "OTHER",
    "WRITER_INFO",
    "WriterSchemaDeadLetters",
]

BY_WRITER = "streamflow_dead_letters_by_writer_schema"
WRITER_INFO = "streamflow_dead_letter_writer_schema"  # exposed as <name>_info
MAX_WRITERS_PER_PORT = 4
MAX_REASON_CHARS = 300
OTHER = "other"  # subject, version and schema id of the writer schemas past the tracked ones


class WriterSchemaDeadLetters:
    """Counts a replica's dead letters of unreadable writer schemas (in its own registry)."""

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self._labels = dict(labels)
        names = [*labels, "port", "subject", "version", "schema_id"]
        self._count = Counter(
            BY_WRITER,
            "Records dead-lettered because their writer schema cannot be read by the port, "
            "per writer schema (the ones past the first few of a port summed as 'other').",
            names,
            registry=registry,
        )
        self._info = Info(
            WRITER_INFO,
            "A writer schema whose records a port dead-letters: its name and why it cannot "
            "be read.",
            names,
            registry=registry,
        )
        self._seen: dict[str, set[int]] = {}  # port -> the schema ids it has series for

    def dead_letter(self, port: str, writer: UnreadableWriter) -> None:
        """One dead letter of ``port`` whose record was written with ``writer``."""
        seen = self._seen.setdefault(port, set())
        if writer.schema_id not in seen and len(seen) >= MAX_WRITERS_PER_PORT:
            self._count.labels(**self._labels, port=port, subject=OTHER, version=OTHER,
                               schema_id=OTHER).inc()  # fmt: skip
            return
        labels = {
            **self._labels,
            "port": port,
            "subject": writer.subject,
            "version": "" if writer.version is None else str(writer.version),
            "schema_id": str(writer.schema_id),
        }
        if writer.schema_id not in seen:
            seen.add(writer.schema_id)
            self._info.labels(**labels).info({"writer": writer.writer, "reason": reason(writer)})
        self._count.labels(**labels).inc()


def reason(writer: UnreadableWriter) -> str:
    """Why the port cannot read the writer's records, short enough for a label."""
    text = "; ".join(writer.problems) or "incompatible with the reader schema"
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"
