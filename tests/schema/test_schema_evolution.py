"""Decoding records written with another version of a schema, and bytes that are not records."""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamflow.schema import DecodeError, SchemaStore, SingleObjectCodec

V1 = {
    "type": "record",
    "name": "Reading",
    "namespace": "iot",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "value", "type": "int"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["TEMP", "RH"]}},
    ],
}
V2 = {
    "type": "record",
    "name": "Reading",
    "namespace": "iot",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "value", "type": "long"},  # int -> long is a promotion
        {
            "name": "kind",
            "type": {"type": "enum", "name": "Kind", "symbols": ["TEMP", "RH", "CO2"]},
        },
        {"name": "unit", "type": "string", "default": "C"},
        {
            "name": "at",
            "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            "default": None,
        },
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
    ],
}


@pytest.fixture
def versions(schema_dir: Callable[..., Path]) -> Path:
    # v2 is current; v1 is kept under history/ so records written with it still decode
    return schema_dir({"iot/reading.avsc": V2, "history/iot/reading.v1.avsc": V1})


def test_a_v1_record_decodes_with_the_v2_reader_via_its_fingerprint(versions: Path) -> None:
    writer_store = SchemaStore(include_builtin=False)
    writer_store.add_schema(V1)
    v1 = writer_store.get("iot.Reading")
    data = SingleObjectCodec(v1).encode({"sensor": "s-1", "value": 21, "kind": "RH"})

    store = SchemaStore([versions], include_builtin=False)
    assert store.problems == []
    assert store.by_fingerprint(v1.fingerprint) == v1  # found although only v2 is current
    reader = SingleObjectCodec(store.get("iot.Reading"), store=store)
    assert reader.schema.fingerprint != v1.fingerprint
    assert reader.decode(data) == {
        "sensor": "s-1",
        "value": 21,
        "kind": "RH",
        "unit": "C",
        "at": None,
        "tags": {},
    }


def test_a_v2_record_decodes_with_its_own_schema(versions: Path) -> None:
    store = SchemaStore([versions], include_builtin=False)
    codec = SingleObjectCodec(store.get("iot.Reading"), store=store)
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    value = {"sensor": "s", "value": 2**40, "kind": "CO2", "unit": "ppm", "at": at, "tags": {}}
    assert codec.decode(codec.encode(value)) == value


def test_versions_added_in_code_are_found_too() -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(V2)
    store.add_version(V1)
    writer = SchemaStore(include_builtin=False)
    writer.add_schema(V1)
    assert store.by_fingerprint(writer.get("iot.Reading").fingerprint) is not None
    assert store.names() == ["iot.Kind", "iot.Reading"]  # a version is not a current type


def test_a_record_of_another_schema_is_one_readable_line(versions: Path) -> None:
    """A dead letter's error says which schema wrote it and what differs (issue 17).

    fastavro's own message printed both parsed schemas whole: 2,000 characters.
    """
    other = {
        "type": "record",
        "name": "Alarm",
        "namespace": "iot",
        "fields": [{"name": "sensor", "type": "string"}, {"name": "level", "type": "int"}],
    }
    store = SchemaStore([versions], include_builtin=False)
    store.add_schema(other)
    alarm = store.get("iot.Alarm")
    data = SingleObjectCodec(alarm).encode({"sensor": "s-1", "level": 3})
    reader = SingleObjectCodec(store.get("iot.Reading"), store=store)
    with pytest.raises(DecodeError) as error:
        reader.decode(data)
    message = str(error.value)
    assert "\n" not in message and len(message) < 300, message
    assert message.startswith(
        f"a iot.Alarm record ({alarm.fingerprint_hex}) cannot be read as iot.Reading ("
    ), message
    assert "iot.Alarm" in message.split(": ", 1)[1]  # what differs, not the schemas' text
    assert "__fastavro_parsed" not in message


def test_an_unknown_fingerprint_is_a_decode_error_naming_both(versions: Path) -> None:
    store = SchemaStore([versions], include_builtin=False)
    reader = SingleObjectCodec(store.get("iot.Reading"), store=store)
    data = b"\xc3\x01" + (0x0123456789ABCDEF).to_bytes(8, "little") + b"\x00"
    with pytest.raises(DecodeError) as error:
        reader.decode(data)
    assert str(error.value) == (
        "unknown writer schema fingerprint 0123456789abcdef; "
        f"expected iot.Reading ({reader.schema.fingerprint_hex}). If it is an older version, "
        "put that version under a history/ directory on the schema paths"
    )


def test_without_a_store_another_fingerprint_is_a_decode_error(
    versions: Path, make_schema: Any
) -> None:
    store = SchemaStore([versions], include_builtin=False)
    v1 = make_schema(V1)
    data = SingleObjectCodec(v1).encode({"sensor": "s", "value": 1, "kind": "TEMP"})
    with pytest.raises(DecodeError, match="unknown writer schema fingerprint"):
        SingleObjectCodec(store.get("iot.Reading")).decode(data)


def test_an_unreadable_writer_version_is_a_decode_error(make_schema: Any) -> None:
    incompatible = {**V1, "fields": [{"name": "sensor", "type": "long"}]}
    store = SchemaStore(include_builtin=False)
    store.add_schema(V2)
    store.add_version(incompatible)
    writer = make_schema(incompatible)
    data = SingleObjectCodec(writer).encode({"sensor": 5})
    with pytest.raises(
        DecodeError,
        match=r"cannot be read as iot\.Reading .*: sensor: the reader expects string, the writer",
    ):
        SingleObjectCodec(store.get("iot.Reading"), store=store).decode(data)


@pytest.fixture
def codec() -> SingleObjectCodec:
    store = SchemaStore(include_builtin=False)
    store.add_schema(V2)
    return SingleObjectCodec(store.get("iot.Reading"), store=store)


GOOD = {"sensor": "abc", "value": 300, "kind": "TEMP", "unit": "K", "at": None, "tags": {"a": "b"}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not Avro single-object encoded (expected marker C3 01, got empty)"),
        (b'{"json": true}', "not Avro single-object encoded (expected marker C3 01, got 7b 22)"),
        (
            b"\xc3\x02" + bytes(8),
            "not Avro single-object encoded (expected marker C3 01, got c3 02)",
        ),
        (
            b"\xc3\x01\x00",
            "truncated Avro single-object header: 3 bytes, the marker and "
            "fingerprint alone take 10",
        ),
    ],
)
def test_bytes_without_the_marker_are_decode_errors(
    codec: SingleObjectCodec, data: bytes, message: str
) -> None:
    with pytest.raises(DecodeError) as error:
        codec.decode(data)
    assert str(error.value) == message


def test_every_truncation_is_a_decode_error(codec: SingleObjectCodec) -> None:
    data = codec.encode(GOOD)
    for end in range(len(data)):
        with pytest.raises(DecodeError):
            codec.decode(data[:end])


def test_a_truncated_body_says_so(codec: SingleObjectCodec) -> None:
    data = codec.encode(GOOD)
    with pytest.raises(DecodeError, match="the record is truncated"):
        codec.decode(data[:-1])


def test_trailing_bytes_are_a_decode_error(codec: SingleObjectCodec) -> None:
    with pytest.raises(
        DecodeError, match=re.escape("2 trailing bytes after the iot.Reading record")
    ):
        codec.decode(codec.encode(GOOD) + b"\x00\x00")


@pytest.mark.parametrize(
    "body",
    [
        b"\xff" * 12,  # a varint that never ends
        b"\x7f" + b"x" * 10,  # a string length far past the end
        b"\x01",  # a negative string length
        b"\x06abc\x02\x0e",  # an int, then enum index 7 of 3 symbols
        b"\x02\xff\xfe",  # invalid UTF-8 in a string
        bytes(range(256)),
    ],
)
def test_garbage_after_a_valid_header_is_a_decode_error(
    codec: SingleObjectCodec, body: bytes
) -> None:
    with pytest.raises(DecodeError):
        codec.decode(codec.header + body)


def test_random_bytes_never_raise_anything_but_decode_error(codec: SingleObjectCodec) -> None:
    rng = random.Random(20240601)
    good = codec.encode(GOOD)
    for _ in range(3000):
        if rng.random() < 0.5:
            data = codec.header + rng.randbytes(rng.randrange(0, 40))
        else:  # flip a few bytes of a valid record, header included
            mutable = bytearray(good)
            for _ in range(rng.randrange(1, 4)):
                mutable[rng.randrange(len(mutable))] = rng.randrange(256)
            data = bytes(mutable)
        with contextlib.suppress(DecodeError):
            codec.decode(data)
