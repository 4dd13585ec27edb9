"""Dead letters a writer schema caused, as ``status`` and the web view show them.

A replica counts the records it dead-letters because their writer schema
cannot be read, per (port, subject, version, schema id), and says why in an
info series beside the count (:mod:`streamflow.runtime.writer_schemas`). Here
those series are read back from the Prometheus text, summed over a
streamlet's replicas, and put in one sentence, so the CLI and the page say the
same thing: ``10 from a new writer schema: version 3 of wines-value (id 7):
cannot read: proline: ...``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from prometheus_client import Metric

from streamflow.runtime import writer_schemas as counted

__all__ = ["WriterSchemaDeadLetters", "read", "summed"]

_COUNT = f"{counted.BY_WRITER}_total"
_INFO = f"{counted.WRITER_INFO}_info"


@dataclass(frozen=True)
class WriterSchemaDeadLetters:
    """Records of one inlet dead-lettered because the port cannot read their writer schema.

    ``schema_id`` None: the writer schemas past the first few a replica tracks, summed
    (``version`` None: the id is not a version of ``subject``, or the registry did not say).
    """

    port: str
    subject: str
    version: int | None
    schema_id: int | None
    count: int
    writer: str = ""  # the writer schema's full name
    reason: str = ""  # why the port cannot read it

    @property
    def other(self) -> bool:
        return self.schema_id is None

    def describe(self) -> str:
        """``10 from a new writer schema: version 3 of S (id 7): cannot read: <reason>``."""
        if self.other:
            return (
                f"{self.count} from other new writer schemas (more than "
                f"{counted.MAX_WRITERS_PER_PORT} on {self.port})"
            )
        if self.version is not None:
            which = f"version {self.version} of {self.subject} (id {self.schema_id})"
        else:
            which = f"schema id {self.schema_id} (not a version of {self.subject})"
        why = f": cannot read: {self.reason}" if self.reason else ""
        return f"{self.count} from a new writer schema: {which}{why}"


def read(families: Iterable[Metric]) -> tuple[WriterSchemaDeadLetters, ...]:
    """What one replica's parsed ``/metrics`` says, in the order the series came."""
    counts: dict[tuple[str, str, str, str], float] = {}
    infos: dict[tuple[str, str, str, str], dict[str, str]] = {}
    for family in families:
        for sample in family.samples:
            if sample.name not in (_COUNT, _INFO):
                continue
            labels = sample.labels
            key = (
                labels.get("port", ""),
                labels.get("subject", ""),
                labels.get("version", ""),
                labels.get("schema_id", ""),
            )
            if sample.name == _COUNT:
                counts[key] = counts.get(key, 0.0) + sample.value
            else:
                infos[key] = labels
    return tuple(_entry(key, value, infos.get(key, {})) for key, value in counts.items())


def summed(
    groups: Iterable[Iterable[WriterSchemaDeadLetters]],
) -> tuple[WriterSchemaDeadLetters, ...]:
    """Several replicas' entries as one per (port, subject, version, schema id), most first."""
    found: dict[tuple[str, str, int | None, int | None], WriterSchemaDeadLetters] = {}
    for entries in groups:
        for entry in entries:
            key = (entry.port, entry.subject, entry.version, entry.schema_id)
            known = found.get(key)
            if known is None:
                found[key] = entry
            else:
                found[key] = replace(
                    known,
                    count=known.count + entry.count,
                    writer=known.writer or entry.writer,
                    reason=known.reason or entry.reason,
                )
    return tuple(sorted(found.values(), key=lambda e: (e.other, -e.count, e.port, e.subject)))


def _entry(
    key: tuple[str, str, str, str], value: float, info: dict[str, str]
) -> WriterSchemaDeadLetters:
    port, subject, version, schema_id = key
    other = schema_id == counted.OTHER
    return WriterSchemaDeadLetters(
        port=port,
        subject="" if other else subject,
        version=int(version) if version.isdigit() else None,
        schema_id=int(schema_id) if schema_id.isdigit() else None,
        count=int(value),
        writer=info.get("writer", ""),
        reason=info.get("reason", ""),
    )
