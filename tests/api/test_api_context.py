"""The Context's typed side channels, its close callbacks, and the fixed sets of the descriptor."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from streamflow.api import (
    Context,
    ControlInlet,
    Inlet,
    Logic,
    Outlet,
    PortKind,
    Record,
    Streamlet,
    describe,
)


def test_what_a_streamlet_reports_lands_in_typed_fields() -> None:
    context = Context()
    context.set_state("model", "wine:2")
    context.count_skipped("sampled-out", count=3)
    context.count_skipped("sampled-out")
    context.count_skipped("shed", count=0)
    context.set_gauge("model_loaded", 1.0, description="loaded")
    context.count("explained", description="records explained", count=2)
    assert context.state == {"model": "wine:2"}
    assert context.skipped == {"sampled-out": 4}
    assert context.metrics["model_loaded"].values == {(): 1.0}
    assert context.metrics["explained"].kind == "counter"
    assert context.extras == {}  # the user's own: nothing of the framework writes there


def test_close_callbacks_run_newest_first_sync_or_async_and_once() -> None:
    context = Context()
    closed: list[str] = []

    async def close_client() -> None:
        closed.append("client")

    context.on_close(lambda: closed.append("first"))
    context.on_close(close_client)
    context.on_close(lambda: closed.append("last"))
    asyncio.run(context.aclose())
    assert closed == ["last", "client", "first"]
    asyncio.run(context.aclose())
    assert closed == ["last", "client", "first"]


def test_a_failing_close_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = Context(logger=logging.getLogger("streamflow.streamlet.test"))
    closed: list[str] = []

    async def broken() -> None:
        raise RuntimeError("connection already gone")

    context.on_close(lambda: closed.append("older"))
    context.on_close(broken)
    context.on_close(lambda: closed.append("newer"))
    with caplog.at_level(logging.ERROR, logger="streamflow.streamlet.test"):
        asyncio.run(context.aclose())
    assert closed == ["newer", "older"]
    assert "connection already gone" in caplog.text


class _Processor(Streamlet):
    inp = Inlet("in", "t.In")
    model = ControlInlet("model", "t.Model")
    out = Outlet("out", "t.Out")

    def process(self, record: Record) -> None:
        return None


class _Batched(_Processor):
    def process_batch(self, records: list[Record]) -> list[None]:
        return [None] * len(records)


class _Source(Streamlet):
    out = Outlet("out", "t.Out")

    def source(self) -> None:
        return None


class _Server(Streamlet):
    out = Outlet("out", "t.Out")

    async def serve(self, emitter: object) -> None:
        return None


@pytest.mark.parametrize(
    ("cls", "logic"),
    [
        (_Processor, Logic.PROCESS),
        (_Batched, Logic.PROCESS_BATCH),
        (_Source, Logic.SOURCE),
        (_Server, Logic.SERVE),
    ],
)
def test_the_logic_is_an_enum_that_names_the_method(cls: type[Streamlet], logic: Logic) -> None:
    descriptor = describe(cls)
    assert descriptor.logic is logic
    assert callable(getattr(cls, descriptor.logic))
    assert descriptor.to_json()["logic"] == logic.value
    assert type(descriptor.to_json()["logic"]) is str  # plain data for YAML and JSON


def test_port_kinds_are_an_enum_equal_to_their_old_strings() -> None:
    descriptor = describe(_Processor)
    kinds = {p.name: p.kind for p in (*descriptor.inlets, *descriptor.control_inlets)}
    assert kinds == {"in": PortKind.INLET, "model": PortKind.CONTROL_INLET}
    assert PortKind.CONTROL_INLET == "control-inlet" and f"{PortKind.OUTLET}" == "outlet"
    assert json.loads(json.dumps(descriptor.to_json()))["inlets"][0]["kind"] == "inlet"
