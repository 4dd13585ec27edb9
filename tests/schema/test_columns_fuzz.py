"""The native decoder on hostile bytes: no crash, no hang, no allocation for a lie.

Record values come from anyone who can write to a topic. Random mutations and
truncations of valid records must each decode or fail alone (and what
decodes must be what fastavro decodes), and a length of 2**31 declared in a
few bytes must be refused at once, without the memory it asks for.
"""

from __future__ import annotations

import io
import random
import resource
import time
from typing import Any

import fastavro
import pytest

from streamflow.schema import Schema, columns
from streamflow.schema.bounds import DecodeLimits
from streamflow.schema.columns import ColumnCodec
from tests.schema.avro_support import varint

RICH = {
    "type": "record",
    "name": "Rich",
    "namespace": "fuzz",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "n", "type": "int"},
        {"name": "x", "type": ["null", "double"]},
        {"name": "tags", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "float"}}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "blob", "type": ["null", "bytes", "string"]},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Inner",
                "fields": [
                    {"name": "ok", "type": "boolean"},
                    {"name": "more", "type": {"type": "array", "items": ["null", "Inner"]}},
                ],
            },
        },
    ],
}
BUDGET_S = 3.0


@pytest.fixture
def rich(make_schema: Any) -> Schema:
    if columns._native is None:
        pytest.skip("streamflow._native is not built")
    return make_schema(RICH)  # type: ignore[no-any-return]


def _record(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    return {
        "id": "r" * rng.randrange(5),
        "n": rng.randrange(-(2**31), 2**31),
        "x": rng.choice([None, rng.random()]),
        "tags": {str(i): [rng.randrange(-999, 999)] * i for i in range(rng.randrange(3))},
        "grid": [[rng.random()] * 2 for _ in range(rng.randrange(3))],
        "kind": rng.choice("ABC"),
        "blob": rng.choice([None, b"\x00\xff", "text"]),
        "inner": {"ok": True, "more": [None, {"ok": False, "more": []}][: rng.randrange(3)]},
    }


def _bare(schema: Schema, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema.parsed, record)
    return buf.getvalue()


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        what = rng.randrange(4)
        if what == 0 and out:  # truncate
            del out[rng.randrange(len(out)) :]
        elif what == 1 and out:  # flip a byte
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif what == 2:  # insert a big varint (a huge or negative length, a count)
            at = rng.randrange(len(out) + 1)
            out[at:at] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\x01", b"\x80" * 11, b"\x7f"])
        elif out:  # duplicate a slice
            a = rng.randrange(len(out))
            out[a:a] = out[a : a + rng.randrange(1, 8)]
    return bytes(out)


def test_mutated_records_fail_alone_and_never_crash(rich: Schema) -> None:
    rng = random.Random(20240601)
    codec = ColumnCodec(rich, wire="bare")
    good = [_bare(rich, _record(rng)) for _ in range(50)]
    deadline, batches = time.monotonic() + BUDGET_S, 0
    while time.monotonic() < deadline:
        batch = [_mutate(rng, rng.choice(good)) for _ in range(40)]
        got = codec.decode(batch)
        batches += 1
        failed = [i for i, _ in got.errors]
        assert sorted([*got.rows.tolist(), *failed]) == list(range(len(batch)))
        assert all(isinstance(why, str) and "\n" not in why for _, why in got.errors)
        # what the native decoder accepts, fastavro reads the same way
        for row, record in zip(got.rows.tolist(), got.to_records(), strict=True):
            buf = io.BytesIO(batch[row])
            expected = fastavro.schemaless_reader(buf, rich.parsed, None)
            assert repr(expected) == repr(record)  # repr: a mutated float may be NaN
            assert buf.tell() == len(batch[row])
    assert batches > 10


HUGE = 2**31


@pytest.mark.parametrize(
    ("field", "body", "reason"),
    [
        (
            {"type": "array", "items": "null"},
            varint(HUGE),
            "refused before decoding: an array declares more than 1,000 items "
            "(decode_limits.max_items)",
        ),
        (
            {"type": "map", "values": "null"},
            varint(HUGE) + b"\x02k",
            "refused before decoding: an map declares more than 1,000 items "
            "(decode_limits.max_items)",
        ),
        (
            {"type": "array", "items": "null"},
            varint(-HUGE) + varint(1),  # a block with a size
            "refused before decoding: an array declares more than 1,000 items "
            "(decode_limits.max_items)",
        ),
        (
            "bytes",
            varint(HUGE),
            "cannot decode fuzz.Big: the record is truncated "
            "(5 bytes end in the middle of a value)",
        ),
        ("string", varint(-5), "cannot decode fuzz.Big: a negative length (-5)"),
        ("long", b"\x80" * 11, "cannot decode fuzz.Big: a number longer than 10 bytes"),
    ],
    ids=["array-of-nulls", "map", "negative-block", "bytes", "negative-length", "varint"],
)
def test_a_declared_length_is_checked_before_anything_is_allocated(
    make_schema: Any, field: Any, body: bytes, reason: str
) -> None:
    if columns._native is None:
        pytest.skip("streamflow._native is not built")
    schema = make_schema(
        {
            "type": "record",
            "name": "Big",
            "namespace": "fuzz",
            "fields": [{"name": "f", "type": field}],
        }
    )
    codec = ColumnCodec(schema, wire="bare", limits=DecodeLimits(max_items=1000))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    got = codec.decode([body] * 3)
    assert time.monotonic() - started < 0.5
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024  # 2**31 items, even of one byte, would be gigabytes
    assert got.n == 0
    assert got.errors == [(i, reason) for i in range(3)]


def test_the_native_limit_holds_where_bounds_does_not_walk(make_schema: Any) -> None:
    """A map's items take a byte each, so bounds.py trusts a short record: Rust must not."""
    if columns._native is None:
        pytest.skip("streamflow._native is not built")
    schema = make_schema(
        {
            "type": "record",
            "name": "M",
            "fields": [{"name": "m", "type": {"type": "map", "values": "null"}}],
        }
    )
    codec = ColumnCodec(schema, wire="bare")
    assert codec._bound.walk_above > 10  # bounds.py does not look at this record
    got = codec.decode([varint(HUGE) + b"\x02k"])
    assert got.errors == [
        (
            0,
            "refused before decoding: an map declares more than 1,000,000 "
            "items (decode_limits.max_items)",
        )
    ]


def test_deep_nesting_is_refused_not_recursed_into(make_schema: Any) -> None:
    if columns._native is None:
        pytest.skip("streamflow._native is not built")
    schema = make_schema(
        {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    )
    codec = ColumnCodec(schema, wire="bare", limits=DecodeLimits(max_items=10))
    deep = b"\x02" * 200_000 + b"\x00"  # a chain of 200,000 nodes in 200 KB
    got = codec.decode([deep, b"\x02\x00"])
    assert got.rows.tolist() == [1]
    assert got.errors and got.errors[0][0] == 0
