"""Decode limits: what a record may declare is bounded before anything is built.

The attack: an array of items that take no bytes (``null``, an empty record) lets
15 bytes declare 100,000,000 items, which fastavro then builds (3.3 s, 784 MiB).
Every decoder must refuse it, with one line, before the memory is spent: the
single-object and registry Avro codecs, and the JSON ones. ``tracemalloc`` shows
what was spent; a refused bomb must cost less than a mebibyte.
"""

from __future__ import annotations

import io
import json
import random
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastavro import schemaless_reader

from streamflow.schema import Schema
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits, RecordBound
from streamflow.schema.codecs import DecodeError, JsonCodec, JsonTopicCodec, SingleObjectCodec
from streamflow.schema.registry_codecs import RegistryAvroCodec, RegistryJsonCodec
from tests.schema.avro_support import varint
from tests.schema.test_registry_codecs import SUBJECT, MemoryRegistry, avro_body, framed

MiB = 1 << 20
READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "tests.limits",
    "fields": [{"name": "id", "type": "string"}, {"name": "value", "type": "double"}],
}
# v1 plus an array of nulls with a default: a compatible evolution, and a bomb's carrier
READING_V2 = {
    **READING,
    "fields": [
        *READING["fields"],
        {"name": "pad", "type": {"type": "array", "items": "null"}, "default": []},
    ],
}
EMPTY = {"type": "record", "name": "Empty", "namespace": "tests.limits", "fields": []}
NULLS = {
    **READING,
    "name": "Nulls",
    "fields": [{"name": "items", "type": {"type": "array", "items": "null"}}],
}
EMPTIES = {
    **READING,
    "name": "Empties",
    "fields": [{"name": "items", "type": {"type": "array", "items": EMPTY}}],
}
TENSOR = {
    **READING,
    "name": "Tensor",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "pixels", "type": {"type": "array", "items": "float"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "maybe", "type": ["null", "int", {"type": "array", "items": "long"}]},
    ],
}
LINKED = {
    "type": "record",
    "name": "Node",
    "namespace": "tests.limits",
    "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
}


@contextmanager
def spent(limit: int = MiB) -> Iterator[None]:
    """Fail if the block allocates ``limit`` bytes or more at its peak."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"{peak:,} bytes allocated at the peak"


# -- single-object Avro -------------------------------------------------------------


@pytest.mark.parametrize("doc", [NULLS, EMPTIES], ids=["array-of-null", "array-of-empty-record"])
def test_a_zero_size_item_bomb_is_refused_before_anything_is_built(
    make_schema: Callable[[dict[str, Any]], Schema], doc: dict[str, Any]
) -> None:
    codec = SingleObjectCodec(make_schema(doc))
    bomb = codec.header + varint(100_000_000) + varint(0)
    assert len(bomb) <= 15
    with spent(), pytest.raises(DecodeError) as refused:
        codec.decode(bomb)
    message = str(refused.value)
    assert "more than 1,000,000 items" in message and "decode_limits.max_items" in message
    assert "\n" not in message


def test_blocks_that_each_stay_under_the_item_limit_are_added_up(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = SingleObjectCodec(make_schema(NULLS))
    body = varint(900_000) * 3 + varint(0)  # three blocks, none over the limit alone
    with spent(), pytest.raises(DecodeError, match="more than 1,000,000 items"):
        codec.decode(codec.header + body)


def test_a_negative_block_count_with_its_byte_size_is_counted_too(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = SingleObjectCodec(make_schema(NULLS))
    body = varint(-(10**15)) + varint(0) + varint(0)  # Avro's "count, then size" block
    with spent(), pytest.raises(DecodeError, match="max_items"):
        codec.decode(codec.header + body)


def test_the_decoded_size_is_bounded_as_well_as_the_item_count(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    limits = DecodeLimits(max_items=1_000_000, max_record_bytes=4 * MiB)
    codec = SingleObjectCodec(make_schema(NULLS), limits=limits)
    # 900,000 items is under max_items, but their list alone is 7 MB
    with spent(), pytest.raises(DecodeError) as refused:
        codec.decode(codec.header + varint(900_000) + varint(0))
    assert "more than 4 MiB" in str(refused.value)
    assert "decode_limits.max_record_bytes" in str(refused.value)


def test_a_long_string_array_past_the_size_limit_is_refused_while_walking(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    limits = DecodeLimits(max_items=1_000_000, max_record_bytes=MiB)
    schema = make_schema(TENSOR)
    codec = SingleObjectCodec(schema, limits=limits)
    value = {"id": "x", "pixels": [], "counts": {}, "tags": ["a"] * 20_000, "maybe": None}
    with pytest.raises(DecodeError, match="more than 1 MiB"):
        codec.decode(codec.encode(value))


def test_records_within_the_limits_decode_as_before_walked_or_not(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    """Small limits make every record below be walked first; the defaults make none."""
    schema = make_schema(TENSOR)
    rng = random.Random(7)
    walking = SingleObjectCodec(schema, limits=DecodeLimits(max_items=5000, max_record_bytes=MiB))
    plain = SingleObjectCodec(schema)
    for _ in range(200):
        value = {
            "id": "r" * rng.randrange(0, 40),
            "pixels": [float(rng.randrange(100)) for _ in range(rng.randrange(0, 800))],
            "counts": {f"k{i}": rng.randrange(-(2**40), 2**40) for i in range(rng.randrange(5))},
            "tags": ["t" * rng.randrange(5) for _ in range(rng.randrange(30))],
            "maybe": rng.choice([None, 5, [1, -2, 2**50]]),
        }
        data = plain.encode(value)
        assert walking.decode(data) == value == plain.decode(data)
        # the estimate bounds a walk's exact figure from above
        assert plain.last_size >= walking.last_size > 0


def test_a_recursive_schema_is_walked_and_read(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = SingleObjectCodec(make_schema(LINKED))
    value: dict[str, Any] = {"v": 0, "next": None}
    for i in range(1, 50):
        value = {"v": i, "next": value}
    assert codec.decode(codec.encode(value)) == value


def test_a_truncated_bomb_is_still_described_by_the_decoder(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = SingleObjectCodec(make_schema(TENSOR), limits=DecodeLimits(max_items=10))
    data = codec.encode({"id": "x", "pixels": [1.0] * 5, "counts": {}, "tags": [], "maybe": None})
    with pytest.raises(DecodeError, match="truncated"):
        codec.decode(data[:-4])


def test_the_estimate_is_at_least_what_python_holds(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    """The decoded size is an upper bound: here against tracemalloc's measure, walked or not."""
    schema = make_schema(TENSOR)
    value = {
        "id": "é" * 100,
        "pixels": [0.5] * 5000,
        "counts": {f"key{i}": 2**40 + i for i in range(2000)},
        "tags": [f"tag{i}" for i in range(3000)],
        "maybe": [2**50 + i for i in range(1000)],
    }
    data = SingleObjectCodec(schema).encode(value)
    tracemalloc.start()
    kept = schemaless_reader(io.BytesIO(data[10:]), schema.parsed, None)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert kept == value
    for limits in (DEFAULT_LIMITS, DecodeLimits(max_items=6000, max_record_bytes=64 * MiB)):
        codec = SingleObjectCodec(schema, limits=limits)
        codec.decode(data)
        assert codec.last_size >= held, limits


def test_limits_are_checked_when_made() -> None:
    with pytest.raises(ValueError, match="max_items must be at least 1"):
        DecodeLimits(max_items=0)
    with pytest.raises(ValueError, match="would fit no batch"):
        DecodeLimits(max_record_bytes=2 * MiB, max_batch_bytes=MiB)
    assert DecodeLimits.from_dict(None) is DEFAULT_LIMITS
    assert DecodeLimits.from_dict({"max_items": 5}).max_items == 5


# -- the registry's Avro ------------------------------------------------------------


def test_a_compatible_registry_version_carrying_a_bomb_is_refused(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    """A new version with an extra ``array<null>`` is compatible; 2^62 items in 118 bytes
    used to make decoding run without end."""
    registry = MemoryRegistry()
    codec = RegistryAvroCodec(make_schema(READING), registry, subject=SUBJECT, register=True)
    codec.prepare()
    v2 = registry.add(SUBJECT, "AVRO", json.dumps(READING_V2))
    good = framed(v2, avro_body(READING_V2, {"id": "a", "value": 1.0, "pad": [None, None]}))
    assert codec.decode(good) == {"id": "a", "value": 1.0}
    bomb = framed(v2, avro_body(READING, {"id": "a" * 90, "value": 1.0}) + varint(2**62) + b"\0")
    assert len(bomb) <= 118
    with spent(), pytest.raises(DecodeError) as refused:
        codec.decode(bomb)
    assert "max_items" in str(refused.value)


def test_a_registry_schema_nested_past_the_recursion_limit_is_an_unreadable_writer(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    registry = MemoryRegistry()
    codec = RegistryAvroCodec(make_schema(READING), registry, subject=SUBJECT, register=True)
    codec.prepare()
    text = '{"type": "record", "name": "L0", "fields": []}'
    for i in range(1, 900):  # 900 records, each the only field of the next
        text = f'{{"type": "record", "name": "L{i}", "fields": [{{"name": "f", "type": {text}}}]}}'
    deep_id = registry.add(SUBJECT, "AVRO", text)
    with pytest.raises(DecodeError) as refused:
        codec.decode(framed(deep_id, b"\0"))
    assert f"schema id {deep_id} is refused: it nests 2,699 levels deep" in str(refused.value)


def test_a_registry_schema_too_costly_to_read_is_refused_before_it_is_parsed(
    make_schema: Callable[[dict[str, Any]], Schema], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 300,000-field writer took 7.4 s and 566 MiB to parse; its text alone says no."""
    registry = MemoryRegistry()
    codec = RegistryAvroCodec(make_schema(READING), registry, subject=SUBJECT, register=True)
    codec.prepare()
    fields = [{"name": f"f{i}", "type": "int", "default": 0} for i in range(300_000)]
    huge = registry.add(SUBJECT, "AVRO", json.dumps({**READING, "fields": fields}))
    zeros = {"name": "z", "type": {"type": "array", "items": "int"}, "default": [0] * 150_000}
    widest = registry.add(SUBJECT, "AVRO", json.dumps({**READING, "fields": [zeros]}))

    def never(doc: object) -> None:
        raise AssertionError("the schema was parsed")

    monkeypatch.setattr(codec._store, "version_from", never)
    with pytest.raises(DecodeError, match=r"is refused: its text is [\d,]+ characters, more"):
        codec.decode(framed(huge, b"\0"))
    with pytest.raises(DecodeError, match=r"is refused: it holds about [\d,]+ JSON values"):
        codec.decode(framed(widest, b"\0"))


# -- JSON -------------------------------------------------------------------------


def test_a_json_array_past_max_items_is_refused(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = JsonTopicCodec(make_schema(TENSOR), limits=DecodeLimits(max_items=100))
    doc = {"id": "x", "pixels": [0.0] * 101, "counts": {}, "tags": [], "maybe": None}
    with pytest.raises(DecodeError, match="JSON array holds 101 items, more than 100"):
        codec.decode(json.dumps(doc).encode())
    doc["pixels"] = [0.0] * 100
    assert codec.decode(json.dumps(doc).encode())["pixels"] == doc["pixels"]


def test_a_json_text_past_the_size_limit_is_refused_before_it_is_parsed(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = JsonCodec(make_schema(NULLS), limits=DecodeLimits(max_record_bytes=4 * MiB))
    text = b'{"items": [' + b"null," * 200_000 + b"null]}"  # 1 MB of text, 200,001 values
    with spent(), pytest.raises(DecodeError) as refused:
        codec.decode(text)
    assert "may decode to more than 4 MiB" in str(refused.value)
    assert "refused before decoding" in str(refused.value)


def test_json_nested_past_the_recursion_limit_is_a_decode_error(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = JsonCodec(make_schema(READING))
    with pytest.raises(DecodeError, match="nested too deeply"):
        codec.decode(b"[" * 100_000 + b"]" * 100_000)


def test_the_registry_json_codec_has_the_same_limits(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    registry = MemoryRegistry()
    codec = RegistryJsonCodec(
        make_schema(TENSOR),
        registry,
        subject=SUBJECT,
        register=True,
        limits=DecodeLimits(max_items=10),
    )
    schema_id = codec.prepare()
    doc = {"id": "x", "pixels": [], "counts": {}, "tags": ["t"] * 11, "maybe": None}
    with pytest.raises(DecodeError, match="more than 10"):
        codec.decode(framed(schema_id, json.dumps(doc).encode()))


def test_the_hot_path_takes_no_walk_for_ordinary_schemas(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    """Ordinary records are within the limits by their length alone: no walk."""
    assert RecordBound(make_schema(TENSOR).raw).walk_above > 700_000
    assert RecordBound(make_schema(READING).raw).walk_above > 10_000_000
    assert RecordBound(make_schema(NULLS).raw).walk_above == -1  # every record is walked
