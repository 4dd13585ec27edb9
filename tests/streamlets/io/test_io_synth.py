"""The synthesiser: every record it makes is a valid, encodable record of its schema."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools

import pytest

from streamflow.schema import SchemaStore, SingleObjectCodec
from streamflow.schema.validate import validation_problems
from streamflow.streamlets.io import Synthesiser


@pytest.fixture
def everything(store: SchemaStore) -> Synthesiser:
    return Synthesiser(store.get("iotest.Everything"), seed=7)


def test_every_record_validates_strictly_and_round_trips(everything: Synthesiser) -> None:
    codec = SingleObjectCodec(everything.schema)
    for record in everything.records(count=300):
        assert validation_problems(everything.schema, record, strict=True) == []
        decoded = codec.decode(codec.encode(record))
        assert decoded.keys() == record.keys()


def test_logical_types_get_their_python_types(everything: Synthesiser) -> None:
    record = everything.record()
    assert isinstance(record["ts_millis"], dt.datetime)
    assert record["ts_millis"].tzinfo is not None
    assert record["ts_millis"].microsecond % 1000 == 0
    assert isinstance(record["local_ts"], dt.datetime)
    assert record["local_ts"].tzinfo is None
    assert type(record["day"]) is dt.date
    assert isinstance(record["time_millis"], dt.time)
    assert record["time_millis"].microsecond % 1000 == 0
    assert isinstance(record["price"], decimal.Decimal)
    assert record["price"].as_tuple().exponent == -2
    assert record["fixed_price"].as_tuple().exponent == -4
    assert len(record["uid"]) == 36


def test_the_same_seed_gives_the_same_records(store: SchemaStore) -> None:
    schema = store.get("iotest.Everything")
    first = list(Synthesiser(schema, seed=3).records(count=20))
    again = list(Synthesiser(schema, seed=3).records(count=20))
    other = list(Synthesiser(schema, seed=4).records(count=20))
    assert first == again
    assert first != other


def test_unions_enums_and_collections_vary(everything: Synthesiser) -> None:
    records = list(everything.records(count=200))
    assert {type(r["either"]).__name__ for r in records} == {"int", "str"}
    assert {r["colour"] for r in records} == {"RED", "GREEN", "BLUE"}
    assert any(r["maybe"] is None for r in records)
    assert any(r["maybe"] is not None for r in records)
    assert any(r["numbers"] for r in records) and any(not r["numbers"] for r in records)
    assert any(r["labels"] for r in records)


def test_recursive_records_terminate(everything: Synthesiser) -> None:
    def depth(node: dict[str, object] | None) -> int:
        if node is None:
            return 0
        children = node["children"]
        assert isinstance(children, list)
        below = [depth(c) for c in children] + [depth(node["next"])]  # type: ignore[arg-type]
        return 1 + max(below)

    deepest = max(depth(r["tree"]) for r in everything.records(count=100))
    assert deepest <= everything.max_depth + 1


def test_records_is_endless_without_a_count(store: SchemaStore) -> None:
    synth = Synthesiser(store.get("iotest.Reading"))
    assert len(list(itertools.islice(synth.records(), 1000))) == 1000
