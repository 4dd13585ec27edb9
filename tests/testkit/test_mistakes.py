"""What the harness says about mistakes: schemas, config, and misuse."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from streamflow import Inlet, Outlet, Record, Streamlet, params
from streamflow.testkit import ConfigError, EncodeError, HarnessError, StreamletHarness

HarnessFactory = Callable[..., StreamletHarness]


class Sloppy(Streamlet):
    inp = Inlet("in", "test.Reading")
    scores = Outlet(schema="test.Score")
    mode = params.Choice(["missing", "extra", "wrong-type", "not-a-dict"], default="missing")

    def process(self, record: Record) -> Any:
        if self.mode == "missing":
            return {"id": record.value["id"]}
        if self.mode == "extra":
            return {"id": "x", "score": 1.0, "scroe": 2.0}
        if self.mode == "wrong-type":
            return {"id": 7, "score": "high"}
        return ["not", "records"]


def test_an_output_missing_a_field_names_the_outlet_and_the_field(
    harness: HarnessFactory,
) -> None:
    h = harness(Sloppy)
    with pytest.raises(EncodeError) as error:
        h.process({"id": "a", "value": 1.0})
    assert str(error.value) == (
        "an output for outlet 'scores' (test.Score) does not match its schema: "
        "score: missing required field (double)"
    )


def test_an_unknown_output_field_is_an_error_unless_not_strict(harness: HarnessFactory) -> None:
    with pytest.raises(EncodeError, match=re.escape("scroe: test.Score has no field 'scroe'")):
        harness(Sloppy, config={"mode": "extra"}).process({"id": "a", "value": 1.0})
    # fastavro (and so Kafka) drops unknown fields silently; strict=False does the same
    lenient = harness(Sloppy, config={"mode": "extra"}, strict=False)
    assert lenient.process({"id": "a", "value": 1.0})[0].value == {
        "id": "x",
        "score": 1.0,
        "model": "",
    }


def test_every_wrong_field_is_listed(harness: HarnessFactory) -> None:
    h = harness(Sloppy, config={"mode": "wrong-type"})
    with pytest.raises(EncodeError, match="id: expected string, got int 7; score: expected double"):
        h.process({"id": "a", "value": 1.0})


def test_an_output_that_is_not_a_record_is_an_error(harness: HarnessFactory) -> None:
    h = harness(Sloppy, config={"mode": "not-a-dict"})
    with pytest.raises(ValueError, match="an item of the returned iterable is a str"):
        h.process({"id": "a", "value": 1.0})


def test_a_fed_value_that_does_not_match_the_inlet_is_an_error(harness: HarnessFactory) -> None:
    h = harness(Sloppy)
    with pytest.raises(EncodeError) as error:
        h.feed("in", {"id": "a", "value": "1.0"})
    assert str(error.value) == (
        "a fed value for inlet 'in' (test.Reading) does not match its schema: "
        "value: expected double, got str '1.0'"
    )


class Configured(Streamlet):
    inp = Inlet("in", "test.Reading")
    url = params.Str(description="where the model server listens")
    threshold = params.Float(default=0.5, min=0.0, max=1.0)
    timeout = params.Duration(default="1s")

    def process(self, record: Record) -> None:
        return None


def test_config_problems_are_all_listed(harness: HarnessFactory) -> None:
    with pytest.raises(ConfigError) as error:
        harness(Configured, config={"threshold": 1.5, "timeout": "soon", "treshold": 0.1})
    assert error.value.problems == [
        "unknown parameter 'treshold' (did you mean 'threshold'? "
        "parameters: url, threshold, timeout)",
        "missing required parameter 'url' (str): where the model server listens",
        "threshold: 1.5 is above the maximum 1",
        "timeout: expected a duration such as 500ms, 5s, 2m or 1h, got 'soon'",
    ]
    assert str(error.value).startswith("invalid config for ")


def test_a_port_schema_that_is_not_found_is_named(harness: HarnessFactory) -> None:
    class Lost(Streamlet):
        inp = Inlet("in", "test.Readng")

        def process(self, record: Record) -> None:
            return None

    with pytest.raises(HarnessError) as error:
        harness(Lost)
    assert "inlet 'in': unknown schema 'test.Readng' (did you mean 'test.Reading'?)" in str(
        error.value
    )
    assert "pass schema_paths= to the harness" in str(error.value)


def test_feeding_an_unknown_inlet_is_an_error(harness: HarnessFactory) -> None:
    h = harness(Sloppy)
    with pytest.raises(HarnessError, match=r"has no inlet 'input' .*inlets: in\)"):
        h.feed("input", {"id": "a", "value": 1.0})
    with pytest.raises(HarnessError, match="has no control-inlet 'in'"):
        h.control("in", {"id": "a", "value": 1.0})


def test_keys_must_match_the_values(harness: HarnessFactory) -> None:
    h = harness(Sloppy)
    with pytest.raises(HarnessError, match="2 keys for 1 values"):
        h.feed("in", [{"id": "a", "value": 1.0}], keys=["a", "b"])
    with pytest.raises(HarnessError, match=r"either key= .* or keys="):
        h.feed("in", [{"id": "a", "value": 1.0}], key="a", keys=["a"])


def test_run_source_on_a_processor_is_an_error(harness: HarnessFactory) -> None:
    with pytest.raises(HarnessError, match="has no source\\(\\); feed it and run\\(\\)"):
        harness(Sloppy).run_source(limit=1)


def test_a_key_function_that_returns_a_non_string_is_an_error(harness: HarnessFactory) -> None:
    class IntKeys(Streamlet):
        inp = Inlet("in", "test.Reading")
        scores = Outlet(schema="test.Score", key=lambda v: len(v["id"]))  # type: ignore[arg-type,return-value]

        def process(self, record: Record) -> dict[str, Any]:
            return {"id": record.value["id"], "score": 0.0}

    with pytest.raises(ValueError, match="the key 1 \\(int\\); keys are strings or None"):
        harness(IntKeys).process({"id": "a", "value": 1.0})


def test_a_torn_down_harness_cannot_run_again(harness: HarnessFactory) -> None:
    h = harness(Sloppy)
    h.teardown()
    with pytest.raises(HarnessError, match="torn down"):
        h.process({"id": "a", "value": 1.0})
