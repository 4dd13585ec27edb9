"""The live swap (`streamflow.models.swap`): how serving and drift follow their versions."""

from __future__ import annotations

import asyncio
import threading

import pytest

from streamflow.models.swap import LiveSwap, Swapped
from tests.waiting import wait_until


class _Loads:
    """Loads that each wait for their own gate, and records what was closed."""

    def __init__(self) -> None:
        self.gates: dict[str, threading.Event] = {}
        self.cancelled: dict[str, threading.Event] = {}
        self.closed: list[str] = []

    def load(self, spec: str, cancelled: threading.Event) -> str:
        self.cancelled[spec] = cancelled
        gate = self.gates.setdefault(spec, threading.Event())
        gate.wait(30)
        if spec.startswith("bad"):
            raise ValueError(f"{spec} does not load")
        return f"loaded {spec}"

    async def close(self, loaded: str) -> None:
        self.closed.append(loaded)

    def swap(self) -> LiveSwap[str, str]:
        return LiveSwap(self.load, close=self.close, thread_name="test-load", workers=2)


def _started(loads: _Loads, spec: str) -> None:
    wait_until(lambda: spec in loads.cancelled, what=f"{spec}'s load to start", timeout=30)


def _finished(swap: LiveSwap[str, str]) -> Swapped[str, str]:
    return wait_until(swap.poll, what="a load to finish", timeout=30)


def test_a_load_is_swapped_in_only_when_polled_after_it_finished() -> None:
    loads = _Loads()
    swap = loads.swap()
    assert swap.submit("v1") is None
    assert swap.pending == "v1"
    assert swap.poll() is None  # still loading: the current one goes on
    loads.gates.setdefault("v1", threading.Event()).set()
    assert _finished(swap) == Swapped("v1", "loaded v1")
    assert swap.current == "loaded v1"
    assert swap.pending is None
    assert swap.poll() is None
    swap.shutdown()


def test_a_newer_spec_supersedes_a_load_under_way_and_cancels_it() -> None:
    loads = _Loads()
    swap = loads.swap()
    swap.submit("v1")
    _started(loads, "v1")
    assert swap.submit("v2") == "v1"
    assert loads.cancelled["v1"].is_set()  # a download checks this and stops
    loads.gates["v1"].set()  # the old load finishing late is not swapped in
    loads.gates.setdefault("v2", threading.Event()).set()
    assert _finished(swap).spec == "v2"
    assert swap.current == "loaded v2"
    swap.shutdown()


def test_a_superseded_load_that_still_ends_is_closed_like_a_replaced_one() -> None:
    """A load already running when it is superseded cannot be stopped from outside (a
    download stops on its cancel event; a model server's check does not): whatever it
    makes is closed at the next batch, so its connections do not leak."""
    loads = _Loads()
    swap = loads.swap()
    swap.submit("v1")
    _started(loads, "v1")
    swap.submit("v2")
    loads.gates["v1"].set()  # v1 ends anyway, after it was superseded
    loads.gates.setdefault("v2", threading.Event()).set()
    assert _finished(swap).spec == "v2"

    def closed_v1() -> bool:
        asyncio.run(swap.close_retired())
        return "loaded v1" in loads.closed

    wait_until(closed_v1, what="the superseded load's model closed", timeout=30)
    assert swap.current == "loaded v2" and "loaded v2" not in loads.closed
    swap.shutdown()


def test_a_failed_load_leaves_the_current_one_and_retires_nothing() -> None:
    loads = _Loads()
    swap = loads.swap()
    loads.gates["v1"] = loads.gates["bad2"] = threading.Event()
    loads.gates["v1"].set()
    swap.submit("v1")
    _finished(swap)
    swap.submit("bad2")
    failed = _finished(swap)
    assert failed.loaded is None
    assert isinstance(failed.error, ValueError)
    assert swap.current == "loaded v1"
    asyncio.run(swap.close_retired())
    assert loads.closed == []
    swap.shutdown()


def test_the_replaced_one_is_closed_at_the_next_batch_and_the_last_at_close() -> None:
    loads = _Loads()
    swap = loads.swap()
    for spec in ("v1", "v2", "v3"):
        loads.gates[spec] = threading.Event()
        loads.gates[spec].set()
    swap.submit("v1")
    _finished(swap)
    swap.submit("v2")
    _finished(swap)
    assert loads.closed == []  # poll is synchronous: nothing is closed there
    asyncio.run(swap.close_retired())
    assert loads.closed == ["loaded v1"]
    swap.submit("v3")
    _finished(swap)
    asyncio.run(swap.close())
    assert loads.closed == ["loaded v1", "loaded v2", "loaded v3"]
    swap.shutdown()


def test_shutdown_cancels_a_load_under_way() -> None:
    loads = _Loads()
    swap = loads.swap()
    swap.submit("v1")
    _started(loads, "v1")
    swap.shutdown()
    assert loads.cancelled["v1"].is_set()
    loads.gates["v1"].set()


@pytest.mark.parametrize("workers", [1, 4])
def test_a_swap_takes_its_workers(workers: int) -> None:
    swap: LiveSwap[str, str] = LiveSwap(
        lambda s, c: s, close=_Loads().close, thread_name="t", workers=workers
    )
    swap.submit("x")
    assert _finished(swap).loaded == "x"
    swap.shutdown()
