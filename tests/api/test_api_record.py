"""A Record read from Kafka takes its offset, key, timestamp and headers from the message lazily."""

from __future__ import annotations

from confluent_kafka import Message

from streamflow.api.streamlet import Record


def _message(**overrides: object) -> Message:
    fields: dict[str, object] = {
        "topic": "in",
        "partition": 2,
        "offset": 7,
        "key": b"k1",
        "value": b"ignored",
        "headers": [("streamflow-schema", b"a.B"), ("trace", b"t1")],
        "timestamp": (1, 1_700_000_000_000),
    }
    return Message(**(fields | overrides))


def test_a_consumed_record_reads_key_timestamp_and_headers_from_its_message() -> None:
    record = Record.consumed(_message(), {"x": 1}, "in", "in-topic", 2)
    assert record.offset == 7
    assert record.key == "k1"
    assert record.timestamp_ms == 1_700_000_000_000
    assert record.headers == {"streamflow-schema": b"a.B", "trace": b"t1"}
    assert record.headers is record.headers  # decoded once


def test_a_consumed_record_equals_the_record_built_by_hand() -> None:
    consumed = Record.consumed(_message(), {"x": 1}, "in", "in-topic", 2)
    built = Record(
        {"x": 1},
        "k1",
        "in",
        "in-topic",
        2,
        7,
        1_700_000_000_000,
        {"streamflow-schema": b"a.B", "trace": b"t1"},
    )
    assert consumed == built
    assert repr(consumed) == repr(built)
    assert consumed != Record({"x": 2})


def test_no_key_no_headers_and_an_undecodable_key() -> None:
    bare = Record.consumed(_message(key=None, headers=None), {}, "in", "t", 0)
    assert bare.key is None and bare.headers == {}
    odd = Record.consumed(_message(key=b"\xff\xfe"), {}, "in", "t", 0)
    assert odd.key == "\ufffd\ufffd"


def test_a_record_built_by_hand_keeps_what_it_was_given() -> None:
    record = Record({"v": 1.0}, key="a", inlet="in", timestamp_ms=5, headers={"h": b"1"})
    assert (record.key, record.timestamp_ms, dict(record.headers)) == ("a", 5, {"h": b"1"})
    assert Record({"v": 1.0}).headers == {} and Record({"v": 1.0}).key is None
