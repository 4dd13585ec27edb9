"""State values written to hurt: the changelog is read back into the replica, so its
bytes are judged before msgpack builds anything from them.

A 714-byte value of 200 nested extensions made the replica segfault when its
logic read the key, at every restart. The tests that decode such a value do it
in a child process, so that a crash fails the test instead of ending pytest.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from streamflow import Inlet, Outlet, Record, Streamlet
from streamflow.runtime.inmemory import MemoryBroker
from streamflow.runtime.state import codec
from tests.runtime import memory_support
from tests.runtime.memory_support import CHANGELOG

ROOT = Path(__file__).resolve().parents[2]
_READING, _SCALED = "tests.runtime.Reading", "tests.runtime.Scaled"
_MAX_ITEMS = 1_000_000  # codec.MAX_ITEMS, as SECURITY.md states it


class _Counter(Streamlet):
    """Counts records per id in its state."""

    stateful = True
    inp = Inlet("in", _READING)
    out = Outlet("out", _SCALED)

    def process(self, record: Record) -> dict[str, Any]:
        store = self.state.of(record)
        seen = store.get(record.value["id"], 0) + 1
        store.set(record.value["id"], seen)
        return {"id": record.value["id"], "seq": seen}


def nested_extensions(depth: int) -> bytes:
    """``depth`` tuples, each holding the next, as the store writes a tuple: an extension
    around a list (the attacker's 714 bytes held no lists, and are refused sooner)."""
    return _wrapped(depth, inside=b"\x91")


def bare_extensions(depth: int) -> bytes:
    """The attacker's value: ``depth`` extensions, each holding the next directly."""
    return _wrapped(depth, inside=b"")


def _wrapped(depth: int, *, inside: bytes) -> bytes:
    """Built outside in, in linear time (packing each level anew is quadratic)."""
    headers, length = [], 1  # the innermost value: the int 1, one byte
    for _ in range(depth):
        length += len(inside)
        header = b"\xc9" + length.to_bytes(4, "big") + b"\x01"  # ext 32, type 1
        headers.append(header + inside)
        length += len(header)
    return b"".join(reversed(headers)) + b"\x01"


def _in_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_over_hostile_changelog(state_dir: str, depth: str) -> None:
    """In the child: a replica whose changelog holds the hostile value under key "a"."""
    broker = MemoryBroker()
    broker.create_topic(CHANGELOG)
    broker.append(CHANGELOG, nested_extensions(int(depth)), b"a")
    loop = asyncio.new_event_loop()
    rig = memory_support.rig(_Counter(), loop, broker=broker, state_dir=Path(state_dir))
    rig.write({"id": "a"}, {"id": "b"}, {"id": "b"})
    while rig.processor.turn():
        pass
    rig.delivery.poll()
    seqs = [(v["id"], v["seq"]) for v in (json.loads(m.value()) for m in broker.records("out"))]
    letters = rig.dead_letters()
    error = letters["a"]["streamflow-error"].decode() if "a" in letters else ""
    print(json.dumps({"seqs": seqs, "dead": rig.dead, "error": error}))


def test_a_deeply_nested_value_in_the_changelog_is_the_dead_letter_of_its_record(
    tmp_path: Path,
) -> None:
    result = _in_child(
        "import sys; from tests.runtime.test_state_hostile_values import "
        "run_over_hostile_changelog as run; run(*sys.argv[1:])",
        str(tmp_path / "state"),
        "200",
    )
    assert result.returncode == 0, f"the replica died ({result.returncode}): {result.stderr}"
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["seqs"] == [["b", 1], ["b", 2]]  # other keys' records flow
    assert outcome["dead"] == [["a", "logic", "StateError"]]
    error = outcome["error"]
    assert "\n" not in error
    assert "the state of in[0] under 'a' is unreadable" in error
    assert "nests deeper than 32 levels" in error


@pytest.mark.parametrize(
    ("builder", "reason"),
    [
        ("nested_extensions", "it nests deeper than 32 levels"),
        ("bare_extensions", "an extension that holds no list"),
    ],
)
def test_decoding_refuses_deep_extensions_before_building_them(builder: str, reason: str) -> None:
    result = _in_child(
        "import sys\n"
        "from streamflow.runtime.state import codec\n"
        "from tests.runtime import test_state_hostile_values as values\n"
        "try:\n"
        "    codec.decode(getattr(values, sys.argv[1])(100_000))\n"
        "except ValueError as exc:\n"
        "    print(exc)\n",
        builder,
    )
    assert result.returncode == 0, f"decoding crashed ({result.returncode}): {result.stderr}"
    assert result.stdout.strip() == reason


def test_a_changelog_key_that_is_not_text_is_skipped_on_restore(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = MemoryBroker()
    broker.create_topic(CHANGELOG)
    broker.append(CHANGELOG, codec.encode(5), b"\xff\xfe")  # no streamlet writes such a key
    broker.append(CHANGELOG, codec.encode(5), b"b")
    loop = asyncio.new_event_loop()
    try:
        rig = memory_support.rig(_Counter(), loop, broker=broker, state_dir=tmp_path)
        rig.write({"id": "a"}, {"id": "b"})
        while rig.processor.turn():
            pass
        rig.delivery.poll()
    finally:
        loop.close()
    seqs = [(v["id"], v["seq"]) for v in (json.loads(m.value()) for m in broker.records("out"))]
    assert seqs == [("a", 1), ("b", 6)] and rig.dead == []
    assert "skipped 1 records of app.unit.in.changelog[0] whose keys are not UTF-8" in caplog.text


def _nested_lists(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_nested_lists(33), "it nests deeper than 32 levels"),
        (msgpack.packb(msgpack.ExtType(1, msgpack.packb(7))), "an extension that holds no list"),
        (msgpack.packb(msgpack.ExtType(9, msgpack.packb([]))), "an unknown extension (9)"),
        (msgpack.packb(msgpack.Timestamp(0)), "an unknown extension (-1)"),
        (b"\xdd\xff\xff\xff\xff\xc0", "it is cut short"),  # 4 billion items declared
        (msgpack.packb([None] * (_MAX_ITEMS + 1)), "it holds more than 1,000,000 items"),
        (b"\xc1", "a byte no msgpack value starts with (0xc1)"),
        (msgpack.packb(1) + b"\x00", "bytes after the value"),
    ],
)
def test_decoding_refuses_what_the_store_never_writes(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(reason)):
        codec.decode(data)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (["|V8", [1], b"\x00" * 8], "an array of type '|V8'"),
        (["|O8", [1], b"\x00" * 8], "an array of type '|O8'"),
        (["<f8", [2], b"\x00" * 8], "an array whose shape [2] does not fit its 8 bytes"),
        (["<f8", [-1], b"\x00" * 8], "an array whose shape [-1] is not a list of sizes"),
        (["<f8", [1] * 40, b"\x00" * 8], "an array of 40 dimensions"),
    ],
)
def test_an_array_is_checked_before_numpy_sees_it(body: list[Any], reason: str) -> None:
    data = msgpack.packb(msgpack.ExtType(2, msgpack.packb(body, use_bin_type=True)))
    with pytest.raises(ValueError, match="^" + re.escape(reason)):
        codec.decode(data)


def test_a_value_the_store_could_not_read_back_is_refused_when_set() -> None:
    deep: Any = 1
    for _ in range(40):
        deep = (deep,)
    with pytest.raises(TypeError, match="not a storable state value: it nests deeper than 32"):
        codec.encode(deep)
    with pytest.raises(TypeError, match="more than 1,000,000 items"):
        codec.encode([0] * (_MAX_ITEMS + 1))


def test_values_at_the_bounds_still_round_trip() -> None:
    deep: Any = [1]
    for _ in range(31):
        deep = [deep]  # 32 lists
    assert codec.decode(codec.encode(deep)) == deep
    value = {"rows": np.ones((3, 2)), "pair": (np.arange(3), ("x", b"y")), "none": None}
    back = codec.decode(codec.encode(value))
    assert back["rows"].tolist() == [[1, 1], [1, 1], [1, 1]]
    assert back["pair"][0].tolist() == [0, 1, 2] and back["pair"][1] == ("x", b"y")
    assert codec.decode(codec.encode(np.array([[1, "a"]], dtype=object))).tolist() == [[1, "a"]]
