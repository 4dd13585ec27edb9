"""What a scoring run keeps and reports: its state for a resume, its progress, the rows
that did not make it, and the errors that stop it. The loop is
:mod:`streamflow.score.engine`'s.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import KafkaError, Message

from streamflow.runtime import lineage
from streamflow.score.collected import Results

__all__ = [
    "DeadRow",
    "FailedRows",
    "Outcome",
    "Progress",
    "RunState",
    "ScoreError",
    "ScoreStalled",
    "text",
]


class ScoreError(RuntimeError):
    """The run cannot go on (a row that Kafka would not take, say)."""


class ScoreStalled(ScoreError):
    """Rows are out and nothing has come back for a long time."""


class FailedRows:
    """The scorer's producer's ``on_delivery``: librdkafka reports only failures.

    A report per row would cost a Python call per row; success is learnt in bulk
    instead, from a flush when the state is saved.
    """

    def __init__(self) -> None:
        self.first: str | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None and self.first is None:
            headers = dict(cast(list[tuple[str, Any]], msg.headers() or []))
            row = text(headers.get(lineage.ROW)) or "?"
            self.first = f"Kafka did not take row {row}: {err.str()}"

    def producer_config(self) -> dict[str, Any]:
        """What the scorer's producer must be created with."""
        return {"delivery.report.only.error": True, "on_delivery": self}


@dataclass(frozen=True)
class DeadRow:
    """A row that came out as a dead letter, or that never went in."""

    row: int
    stage: str  # the streamlet that dead-lettered it, or "input" for a refused row
    error: str
    error_type: str
    doc: Any = None  # the row as read, for a refused row


@dataclass
class Progress:
    total: int
    sent: int = 0
    results: int = 0
    dead: int = 0
    rejected: int = 0
    elapsed_s: float = 0.0

    @property
    def accounted(self) -> int:
        return self.results + self.dead + self.rejected

    @property
    def in_flight(self) -> int:
        return self.sent - self.results - self.dead

    def to_json(self) -> dict[str, Any]:
        rate = self.accounted / self.elapsed_s if self.elapsed_s > 0 else 0.0
        return {
            "event": "progress",
            "total": self.total,
            "sent": self.sent,
            "results": self.results,
            "dead_letters": self.dead,
            "rejected": self.rejected,
            "records_per_s": round(rate, 1),
            "elapsed_s": round(self.elapsed_s, 1),
        }


@dataclass
class Outcome:
    """What a run collected: the first result of each row, and the rows that did not make it."""

    results: Results = field(default_factory=Results)
    dead: dict[int, DeadRow] = field(default_factory=dict)
    #: results beyond the first for a row (a streamlet that writes several, or a replay)
    extra_results: int = 0


@dataclass
class RunState:
    """What a resumed run needs; saved as JSON next to the results file."""

    run: str
    input: dict[str, Any]
    total: int
    #: where collection started: topic -> partition (as text, for JSON) -> offset
    offsets: dict[str, dict[str, int]]
    #: rows 0..acknowledged-1 (in file order) are on the input topic
    acknowledged: int = 0

    def save(self, path: Path) -> None:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.__dict__, indent=2) + "\n", encoding="utf-8")
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path) -> RunState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise ScoreError(f"{path} is not a scoring run's state ({exc}): delete it") from None


def text(value: Any) -> str:
    """A header's value as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
