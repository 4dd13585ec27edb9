"""ConsoleEgress: JSON lines (or indented JSON) on standard output."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from streamflow import Inlet
from streamflow.api import Record, describe
from streamflow.streamlets.io import ConsoleEgress

Make = Callable[..., Any]


class Printer(ConsoleEgress):
    in_ = Inlet("in", "iotest.Reading")


def test_prints_one_json_line_per_record(make: Make, capsys: pytest.CaptureFixture[str]) -> None:
    printer = make(Printer)
    printer.process(Record({"id": "a", "blob": b"\x01", "at": dt.date(2024, 1, 2)}, key="k"))
    printer.process(Record({"id": "é"}))
    out = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in out] == [
        {"id": "a", "blob": "AQ==", "at": "2024-01-02"},
        {"id": "é"},
    ]


def test_pretty_format_with_key(make: Make, capsys: pytest.CaptureFixture[str]) -> None:
    printer = make(Printer, {"format": "pretty", "include_key": True})
    printer.process(Record({"id": "a"}, key="k"))
    out = capsys.readouterr().out
    assert out == '{\n  "key": "k",\n  "value": {\n    "id": "a"\n  }\n}\n'


def test_describes_as_an_egress_with_a_format_choice() -> None:
    descriptor = describe(Printer)
    assert descriptor.shape.value == "egress"
    assert descriptor.logic == "process"
    assert descriptor.param("format") is not None
    assert descriptor.param("format").constraints == {"choices": ["json", "pretty"]}  # type: ignore[union-attr]
