"""Parsing a raw config mapping into typed parameter values."""

from __future__ import annotations

import datetime as dt

import pytest

from streamflow import Inlet, Record, Streamlet, params
from streamflow.api import describe
from streamflow.api.config import ConfigError, config_problems, parse_config


class Tuned(Streamlet):
    inp = Inlet("in", "t.In")
    url = params.Str()
    batch = params.Int(default=32, min=1)
    timeout = params.Duration(default="500ms")
    labels = params.List(params.Str(), default=["a"])
    verbose = params.Bool(default=False)

    def process(self, record: Record) -> None:
        return None


class Plain(Streamlet):
    inp = Inlet("in", "t.In")

    def process(self, record: Record) -> None:
        return None


def test_values_are_typed_and_defaults_filled() -> None:
    config = parse_config(describe(Tuned), {"url": "http://x", "batch": "64", "labels": "x, y"})
    assert config == {
        "url": "http://x",
        "batch": 64,
        "timeout": dt.timedelta(milliseconds=500),
        "labels": ["x", "y"],
        "verbose": False,
    }
    streamlet = Tuned(config)
    assert streamlet.timeout == dt.timedelta(milliseconds=500)
    assert streamlet.batch == 64


def test_every_problem_is_reported_at_once() -> None:
    problems = config_problems(describe(Tuned), {"batch": 0, "verbose": "maybe", "extra": 1})
    assert problems == [
        "unknown parameter 'extra' (parameters: url, batch, timeout, labels, verbose)",
        "missing required parameter 'url' (str)",
        "batch: 0 is below the minimum 1",
        "verbose: expected true or false, got 'maybe'",
    ]
    with pytest.raises(ConfigError) as error:
        parse_config(describe(Tuned), {"batch": 0, "verbose": "maybe", "extra": 1})
    assert error.value.problems == problems


def test_a_streamlet_without_parameters() -> None:
    assert parse_config(describe(Plain), None) == {}
    assert config_problems(describe(Plain), {"x": 1}) == [
        "unknown parameter 'x': this streamlet takes no parameters"
    ]
