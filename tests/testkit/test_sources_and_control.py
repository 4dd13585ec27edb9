"""Ingress sources, control inlets, and fan-out through the harness."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from streamflow import ControlInlet, Emit, Inlet, Outlet, Record, Streamlet, params
from streamflow.testkit import EncodeError, HarnessError, StreamletHarness

HarnessFactory = Callable[..., StreamletHarness]


class Counter(Streamlet):
    """Emits readings 0, 1, 2, ... keyed by their id."""

    readings = Outlet(schema="test.Reading", key=lambda value: value["id"])
    count = params.Int(default=3, min=0)
    closed = False

    def source(self) -> Iterator[dict[str, Any] | None]:
        try:
            for i in range(self.count):
                yield None if i == 1 else {"id": f"n{i}", "value": float(i)}
        finally:
            self.closed = True


def test_a_generator_source_emits_through_its_outlet(harness: HarnessFactory) -> None:
    h = harness(Counter, config={"count": 4})
    first = h.run_source(limit=2)
    assert [(o.key, o.value["id"]) for o in first] == [("n0", "n0")]  # item 1 was None
    rest = h.run_source(limit=10)  # continues where it stopped, ends with the generator
    assert [o.value["id"] for o in rest] == ["n2", "n3"]
    assert [k for k, _ in h.outputs("readings")] == ["n0", "n2", "n3"]
    h.teardown()
    streamlet = h.streamlet
    assert isinstance(streamlet, Counter)
    assert streamlet.closed


class Ticker(Streamlet):
    """An async source; an ingress without key function writes unkeyed records."""

    readings = Outlet(schema="test.Reading")

    async def source(self) -> AsyncIterator[Emit]:
        for i in range(100):
            await asyncio.sleep(0)
            yield self.readings({"id": f"t{i}", "value": 0.5})


def test_an_async_generator_source(harness: HarnessFactory) -> None:
    h = harness(Ticker)
    out = h.run_source(limit=3)
    assert [(o.key, o.value["id"]) for o in out] == [(None, "t0"), (None, "t1"), (None, "t2")]


def test_a_silent_async_source_times_out(harness: HarnessFactory) -> None:
    class Silent(Ticker):
        async def source(self) -> AsyncIterator[Emit]:
            await asyncio.sleep(3600)
            yield self.readings({"id": "never", "value": 0.0})

    h = harness(Silent)
    with pytest.raises(TimeoutError, match=re.escape("source() produced nothing within 0.05s")):
        h.run_source(limit=1, timeout=0.05)


class ModelScorer(Streamlet):
    """Scores with whatever model the control inlet last named; holds data until then."""

    inp = Inlet("in", "test.Reading")
    model = ControlInlet(schema="streamflow.ml.ModelDescriptor")
    scores = Outlet(schema="test.Score")
    current: tuple[str, int] | None = None

    def on_control(self, inlet: str, record: Record) -> None:
        descriptor = record.value
        if descriptor["kind"] != "KERAS":
            raise ValueError(f"cannot load a {descriptor['kind']} model")
        self.current = (descriptor["name"], descriptor["version"])
        self.context.set_state("model", f"{descriptor['name']}:{descriptor['version']}")

    def accepts_data(self) -> bool:
        return self.current is not None

    def process(self, record: Record) -> dict[str, Any]:
        assert self.current is not None
        name, version = self.current
        return {"id": record.value["id"], "score": version * 1.0, "model": f"{name}:{version}"}


def _descriptor(version: int, kind: str = "KERAS") -> dict[str, Any]:
    return {"name": "churn", "version": version, "kind": kind}


def test_a_control_inlet_changes_behaviour_between_batches(harness: HarnessFactory) -> None:
    h = harness(ModelScorer)
    h.feed("in", {"id": "early", "value": 1.0})
    assert h.run() == [] and h.pending == 1  # held until a model arrives
    h.control("model", _descriptor(1), key="churn")
    h.run()
    h.feed("in", {"id": "later", "value": 1.0})
    h.control("model", [_descriptor(2)])
    h.run()
    assert [(v["id"], v["model"]) for v in h.values()] == [
        ("early", "churn:1"),
        ("later", "churn:2"),
    ]
    assert h.state == {"model": "churn:2"}


def test_a_failing_control_record_is_a_dead_letter(harness: HarnessFactory) -> None:
    h = harness(ModelScorer)
    h.control("model", [_descriptor(1), _descriptor(2, kind="TF_SERVING")])
    streamlet = h.streamlet
    assert isinstance(streamlet, ModelScorer)
    assert streamlet.current == ("churn", 1)  # the old model keeps serving
    (dead,) = h.dead_letters
    assert (dead.inlet, dead.kind) == ("model", "control")
    assert dead.error == "ValueError: cannot load a TF_SERVING model"


class Router(Streamlet):
    """Fan-out: every reading is scored; high ones also raise an alert keyed by level."""

    inp = Inlet("in", "test.Reading")
    scores = Outlet(schema="test.Score")
    alerts = Outlet(schema="test.Alert", key=lambda alert: alert["level"].lower())

    def process(self, record: Record) -> list[Emit]:
        value = record.value["value"]
        out = [Emit("scores", {"id": record.value["id"], "score": value})]
        if value > 0.9:
            out.append(self.alerts({"id": record.value["id"], "level": "CRIT"}))
        if value > 0.5:
            out.append(Emit("scores", {"id": "audit", "score": value}, key=None))
        return out


def test_fan_out_with_emit_and_key_functions(harness: HarnessFactory) -> None:
    h = harness(Router)
    h.feed("in", [{"id": "a", "value": 0.2}, {"id": "b", "value": 0.95}], keys=["ka", "kb"])
    h.run()
    assert h.outputs("scores") == [
        ("ka", {"id": "a", "score": 0.2, "model": ""}),
        ("kb", {"id": "b", "score": 0.95, "model": ""}),
        (None, {"id": "audit", "score": 0.95, "model": ""}),  # an explicit None key wins
    ]
    assert h.outputs("alerts") == [("crit", {"id": "b", "level": "CRIT"})]
    assert [o.outlet for o in h.all_outputs] == ["scores", "scores", "alerts", "scores"]
    with pytest.raises(HarnessError, match="has 2 outlets \\(scores, alerts\\); name the outlet"):
        h.outputs()


def test_a_plain_dict_from_a_fan_out_is_an_error(harness: HarnessFactory) -> None:
    class Vague(Router):
        def process(self, record: Record) -> dict[str, Any]:  # type: ignore[override]
            return {"id": "x", "score": 1.0}

    h = harness(Vague)
    with pytest.raises(ValueError) as error:
        h.process({"id": "a", "value": 0.1})
    assert "has several outlets (scores, alerts): a plain dict does not say which one" in str(
        error.value
    )


def test_an_emit_to_an_unknown_outlet_is_an_error(harness: HarnessFactory) -> None:
    class Typo(Router):
        def process(self, record: Record) -> list[Emit]:
            return [Emit("alert", {"id": "x", "level": "WARN"})]

    h = harness(Typo)
    with pytest.raises(ValueError, match="has no outlet 'alert' \\(did you mean 'alerts'\\? "):
        h.process({"id": "a", "value": 0.1})


class Pusher(Streamlet):
    """A ``serve()`` ingress: what a test hands it is emitted once acknowledged."""

    readings = Outlet(schema="test.Reading", key=lambda value: value["id"])

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.acked: list[str] = []
        self.stopped = False

    async def serve(self, emitter: Any) -> None:
        try:
            while True:
                value = await self.inbox.get()
                await emitter.emit(value)
                self.acked.append(value["id"])
        finally:
            self.stopped = True


def test_a_serve_ingress_runs_through_the_serve_runner(harness: HarnessFactory) -> None:
    h = harness(Pusher)
    pusher = h.streamlet
    assert isinstance(pusher, Pusher)

    async def requests() -> int:
        for i in range(3):
            await pusher.inbox.put({"id": f"p{i}", "value": float(i)})
        while len(pusher.acked) < 3:  # emit() returned: the records were acknowledged
            await asyncio.sleep(0.001)
        return len(pusher.acked)

    assert h.serve(requests) == 3
    assert pusher.stopped  # cancelled when the scenario ended, as on SIGTERM
    assert [(key, value["value"]) for key, value in h.outputs()] == [
        ("p0", 0.0),
        ("p1", 1.0),
        ("p2", 2.0),
    ]


def test_a_serve_ingress_emitting_a_value_its_outlet_refuses_fails(
    harness: HarnessFactory,
) -> None:
    h = harness(Pusher)
    pusher = h.streamlet
    assert isinstance(pusher, Pusher)

    async def requests() -> None:
        await pusher.inbox.put({"id": "bad", "value": "not a number"})
        while not pusher.stopped:  # emit() raised inside serve(), which ended
            await asyncio.sleep(0.001)

    with pytest.raises(EncodeError, match="does not match its schema"):
        h.serve(requests)
    assert h.outputs() == [] and pusher.acked == []
