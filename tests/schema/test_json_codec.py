"""The JSON codec: plain JSON in, schema-typed records out, or every reason why not."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable
from typing import Any

import pytest

from streamflow.schema import DecodeError, JsonCodec, Schema, SingleObjectCodec

EVENT = {
    "type": "record",
    "name": "web.Event",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "payload", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2},
            ],
            "default": None,
        },
        {
            "name": "user",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "User",
                    "fields": [
                        {"name": "name", "type": "string"},
                        {"name": "avatar", "type": ["null", "bytes"], "default": None},
                    ],
                },
            ],
            "default": None,
        },
        {
            "name": "kind",
            "type": {"type": "enum", "name": "Kind", "symbols": ["CLICK", "VIEW"]},
            "default": "VIEW",
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "magic", "type": "bytes", "default": "\u00ff\u0000"},
    ],
}


@pytest.fixture
def codec(make_schema: Callable[[dict[str, Any]], Schema]) -> JsonCodec:
    return JsonCodec(make_schema(EVENT))


def _body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def test_plain_json_decodes_into_typed_values(codec: JsonCodec) -> None:
    value = codec.decode(
        _body(
            id="e1",
            count=3,
            score=1,
            payload=base64.b64encode(b"\x00\xffbin").decode(),
            at="2024-03-04T05:06:07.890Z",
            day="2024-03-04",
            price="12.50",
            user={"name": "ann", "avatar": base64.b64encode(b"png").decode()},
        )
    )
    assert value == {
        "id": "e1",
        "count": 3,
        "score": 1.0,
        "payload": b"\x00\xffbin",
        "at": dt.datetime(2024, 3, 4, 5, 6, 7, 890000, tzinfo=dt.UTC),
        "day": dt.date(2024, 3, 4),
        "price": decimal.Decimal("12.50"),
        "user": {"name": "ann", "avatar": b"png"},
        # absent fields get their defaults, exactly as an Avro reader fills them
        "kind": "VIEW",
        "tags": [],
        "magic": b"\xff\x00",  # a bytes default is written as ISO-8859-1 text
    }
    assert isinstance(value["score"], float)


def test_a_decoded_value_encodes_with_the_avro_codec(codec: JsonCodec) -> None:
    value = codec.decode(_body(id="e", count=1, score=0.5, payload="", at=0))
    avro = SingleObjectCodec(codec.schema)
    assert avro.decode(avro.encode(value))["at"] == dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def test_encode_writes_plain_json(codec: JsonCodec) -> None:
    value = codec.decode(
        _body(id="e", count=1, score=0.5, payload="AAE=", at="2024-01-01T00:00:00Z")
    )
    doc = json.loads(codec.encode(value))
    assert doc["payload"] == "AAE=" and doc["at"] == "2024-01-01T00:00:00+00:00"


def test_an_invalid_body_lists_every_reason(codec: JsonCodec) -> None:
    with pytest.raises(DecodeError) as error:
        codec.decode(
            _body(
                count="three",
                score=True,
                payload=1,
                at="yesterday",
                kind="HOVER",
                user={"avatar": None},
                tags=["a", 2],
            )
        )
    assert str(error.value) == (
        "not a valid web.Event: "
        "id: missing required field (string); "
        "count: expected long, got str 'three'; "
        "score: expected double, got bool True; "
        "payload: expected bytes, got int 1; "
        "at: expected long (timestamp-millis), got str 'yesterday'; "
        "user.name: missing required field (string); "
        "kind: 'HOVER' is not a symbol of web.Kind (CLICK, VIEW); "
        "tags[1]: expected string, got int 2"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON: Expecting property name enclosed in double quotes"),
        (b"[1, 2]", "expected a JSON object for web.Event"),
        (b"\xff", "not valid JSON"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_a_decode_error(
    codec: JsonCodec, body: bytes, message: str
) -> None:
    with pytest.raises(DecodeError, match=message):
        codec.decode(body)


def test_a_union_with_several_branches_picks_the_branch_the_value_fits(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = JsonCodec(
        make_schema(
            {
                "type": "record",
                "name": "t.U",
                "fields": [
                    {
                        "name": "v",
                        "type": [
                            "null",
                            "long",
                            {"type": "long", "logicalType": "timestamp-millis"},
                            {
                                "type": "record",
                                "name": "P",
                                "fields": [{"name": "b", "type": "bytes"}],
                            },
                        ],
                    }
                ],
            }
        )
    )
    assert codec.decode(b'{"v": 5}') == {"v": 5}
    assert codec.decode(b'{"v": {"b": "AAE="}}') == {"v": {"b": b"\x00\x01"}}
    assert codec.decode(b'{"v": "2024-01-01T00:00:00Z"}')["v"].year == 2024
    with pytest.raises(DecodeError, match=r"v: expected one of \[null, long, long \(timestamp"):
        codec.decode(b'{"v": "nope"}')
