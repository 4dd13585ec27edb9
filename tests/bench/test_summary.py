"""The headline table of a stored benchmark run: one row per ratio, each named apart."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from bench import summary

RUN = Path(__file__).parents[2] / "bench" / "results" / "2026-12-03-3.json"


def test_every_headline_ratio_has_a_name_of_its_own() -> None:
    rows = summary.headline(json.loads(RUN.read_text()))
    names = collections.Counter(row["ratio"] for row in rows)
    assert [name for name, n in names.items() if n > 1] == []
    # the format costs were measured under each guarantee: both are told apart
    assert "streamflow avro-registry / avro, 100 B, at-least-once: CPU per record" in names
    assert "streamflow avro-registry / avro, 100 B, exactly-once: CPU per record" in names
