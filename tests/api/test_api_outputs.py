"""Routing logic results to outlets: the rules the runtime and the testkit share."""

from __future__ import annotations

from typing import Any

import pytest

from streamflow import Emit, Inlet, Outlet, Record, Streamlet
from streamflow.api import describe
from streamflow.api.outputs import OutputError, OutputRouter, RoutedOutput, normalise_outputs


class One(Streamlet):
    inp = Inlet("in", "t.In")
    out = Outlet(schema="t.Out")

    def process(self, record: Record) -> None:
        return None


class Two(Streamlet):
    inp = Inlet("in", "t.In")
    left = Outlet(schema="t.Out", key=lambda v: f"L-{v['id']}")
    right = Outlet(schema="t.Out")

    def process(self, record: Record) -> None:
        return None


class Sink(Streamlet):
    inp = Inlet("in", "t.In")

    def process(self, record: Record) -> None:
        return None


def route(cls: type[Streamlet], result: Any, key: str | None = "in-key") -> list[RoutedOutput]:
    return OutputRouter(describe(cls)).route(result, input_key=key)


def test_none_is_no_output() -> None:
    assert route(One, None) == []
    assert route(One, [None, None]) == []


def test_a_dict_goes_to_the_only_outlet_with_the_input_key() -> None:
    assert route(One, {"id": 1}) == [RoutedOutput("out", "in-key", {"id": 1})]
    assert route(One, {"id": 1}, key=None) == [RoutedOutput("out", None, {"id": 1})]


def test_an_iterable_of_outputs_keeps_its_order() -> None:
    result = (x for x in [{"id": 1}, None, Emit("out", {"id": 2}, key="k")])
    assert route(One, result) == [
        RoutedOutput("out", "in-key", {"id": 1}),
        RoutedOutput("out", "k", {"id": 2}),
    ]


def test_key_precedence_explicit_then_key_function_then_input_key() -> None:
    outputs = route(
        Two,
        [
            Emit("left", {"id": 1}),  # the key function
            Emit("left", {"id": 2}, key="explicit"),  # an explicit key beats it
            Emit("left", {"id": 3}, key=None),  # and so does an explicit None
            Emit("right", {"id": 4}),  # no key function: the input key is preserved
        ],
    )
    assert [(o.outlet, o.key) for o in outputs] == [
        ("left", "L-1"),
        ("left", "explicit"),
        ("left", None),
        ("right", "in-key"),
    ]


def test_outlet_call_builds_an_emit_with_headers() -> None:
    emit = Two.right({"id": 1}, headers={"streamflow-model": "m:1"})
    (out,) = route(Two, emit)
    assert out == RoutedOutput("right", "in-key", {"id": 1}, {"streamflow-model": "m:1"})


@pytest.mark.parametrize(
    ("cls", "result", "message"),
    [
        (Two, {"id": 1}, "has several outlets (left, right): a plain dict does not say which"),
        (Sink, {"id": 1}, "has no outlets, so its logic must return None, not a record"),
        (
            Two,
            Emit("lefty", {}),
            "has no outlet 'lefty' (did you mean 'left'? outlets: left, right)",
        ),
        (One, Emit("out", [1]), "Emit to outlet 'out' carries a list; the value of an output"),  # type: ignore[arg-type]
        (One, "text", "logic returned is a str; an output is None, a dict, an Emit"),
        (One, 42, "logic returned is a int"),
        (One, [[{"id": 1}]], "an item of the returned iterable is a list"),
        (One, Emit("out", {}, key=5), "Emit gave outlet 'out' the key 5 (int)"),  # type: ignore[arg-type]
    ],
)
def test_results_that_cannot_be_routed(cls: type[Streamlet], result: Any, message: str) -> None:
    with pytest.raises(OutputError) as error:
        route(cls, result)
    assert message in str(error.value)


def test_a_raising_key_function_is_an_output_error() -> None:
    with pytest.raises(OutputError, match="the key function of outlet 'left' raised KeyError"):
        route(Two, Emit("left", {"no-id": 1}))


def test_batch_results_one_per_input() -> None:
    router = OutputRouter(describe(One))
    assert router.batch_results(None, 3) == [None, None, None]
    assert router.batch_results(({"id": i} for i in range(2)), 2) == [{"id": 0}, {"id": 1}]
    with pytest.raises(OutputError, match="returned 1 results for 2 records"):
        router.batch_results([{"id": 1}], 2)
    with pytest.raises(OutputError, match="process_batch returned a dict; it must return a list"):
        router.batch_results({"id": 1}, 1)


def test_normalise_outputs_is_a_one_off_route() -> None:
    assert normalise_outputs({"id": 1}, descriptor=describe(One), input_key="k") == [
        RoutedOutput("out", "k", {"id": 1})
    ]
