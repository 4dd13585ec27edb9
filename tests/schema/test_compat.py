"""Reader/writer compatibility, with messages, and agreement with the reference checker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import avro.schema
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from streamflow.schema import Schema, compatibility_problems

Make = Callable[[dict[str, Any]], Schema]


def record(*fields: dict[str, Any], name: str = "t.Rec", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Color", "symbols": list(symbols), **extra}


INNER = {"type": "record", "name": "Inner", "fields": [{"name": "a", "type": "int"}]}

# (case, reader, writer, expected problems)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    ("identical", record({"name": "x", "type": "int"}), record({"name": "x", "type": "int"}), []),
    (
        "added-field-with-default",
        record({"name": "x", "type": "int"}, {"name": "y", "type": "string", "default": ""}),
        record({"name": "x", "type": "int"}),
        [],
    ),
    (
        "removed-field",
        record({"name": "x", "type": "int"}),
        record({"name": "x", "type": "int"}, {"name": "gone", "type": "string"}),
        [],
    ),
    (
        "int-to-long",
        record({"name": "x", "type": "long"}),
        record({"name": "x", "type": "int"}),
        [],
    ),
    (
        "int-to-double",
        record({"name": "x", "type": "double"}),
        record({"name": "x", "type": "int"}),
        [],
    ),
    (
        "float-to-double",
        record({"name": "x", "type": "double"}),
        record({"name": "x", "type": "float"}),
        [],
    ),
    (
        "string-to-bytes",
        record({"name": "x", "type": "bytes"}),
        record({"name": "x", "type": "string"}),
        [],
    ),
    (
        "added-enum-symbol",
        record({"name": "c", "type": enum("R", "G", "B")}),
        record({"name": "c", "type": enum("R", "G")}),
        [],
    ),
    (
        "removed-symbol-with-enum-default",
        record({"name": "c", "type": enum("R", "X", default="X")}),
        record({"name": "c", "type": enum("R", "G")}),
        [],
    ),
    (
        "widened-to-union",
        record({"name": "x", "type": ["null", "long"]}),
        record({"name": "x", "type": "int"}),
        [],
    ),
    (
        "logical-type-over-long",
        record({"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}),
        record({"name": "t", "type": "long"}),
        [],
    ),
    (
        "renamed-with-alias",
        record({"name": "x", "type": "int"}, name="t.New", aliases=["t.Rec"]),
        record({"name": "x", "type": "int"}),
        [],
    ),
    (
        "field-alias",
        record({"name": "y", "type": "int", "aliases": ["x"]}),
        record({"name": "x", "type": "int"}),
        [],
    ),
    (
        "nested-added-default",
        record(
            {
                "name": "in",
                "type": {
                    **INNER,
                    "fields": [*INNER["fields"], {"name": "b", "type": "int", "default": 0}],
                },
            }
        ),
        record({"name": "in", "type": INNER}),
        [],
    ),
    (
        "recursive",
        record(
            {"name": "next", "type": ["null", "t.Rec"], "default": None},
            {"name": "v", "type": "long"},
        ),
        record(
            {"name": "next", "type": ["null", "t.Rec"], "default": None},
            {"name": "v", "type": "int"},
        ),
        [],
    ),
    # incompatible
    (
        "added-field-without-default",
        record({"name": "x", "type": "int"}, {"name": "label", "type": "string"}),
        record({"name": "x", "type": "int"}),
        [
            "label: the reader's field 'label' has no default and the writer does not write it "
            "(give the field a default)"
        ],
    ),
    (
        "removed-enum-symbol",
        record({"name": "c", "type": enum("R")}),
        record({"name": "c", "type": enum("R", "G", "B")}),
        [
            "c: the reader's enum t.Color lacks G, B, which the writer may write "
            "(add the symbols back, or give the enum a default)"
        ],
    ),
    (
        "type-change",
        record({"name": "x", "type": "string"}),
        record({"name": "x", "type": "int"}),
        ["x: the reader expects string, the writer writes int"],
    ),
    (
        "long-to-int",
        record({"name": "x", "type": "int"}),
        record({"name": "x", "type": "long"}),
        ["x: the reader expects int, the writer writes long"],
    ),
    (
        "narrowed-from-union",
        record({"name": "x", "type": "string"}),
        record({"name": "x", "type": ["null", "string"]}),
        ["x: the reader expects string, the writer writes null"],
    ),
    (
        "union-lost-branch",
        record({"name": "x", "type": ["null", "string"]}),
        record({"name": "x", "type": ["null", "string", "long"]}),
        ["x: the reader's union [null, string] cannot read long"],
    ),
    (
        "fixed-size",
        record({"name": "f", "type": {"type": "fixed", "name": "F", "size": 4}}),
        record({"name": "f", "type": {"type": "fixed", "name": "F", "size": 8}}),
        ["f: fixed t.F is 4 bytes in the reader but 8 in the writer"],
    ),
    (
        "renamed-record",
        record({"name": "x", "type": "int"}, name="t.Other"),
        record({"name": "x", "type": "int"}),
        [
            "the reader's record t.Other does not match the writer's record t.Rec "
            "(keep the name, or add 't.Rec' to the reader's aliases)"
        ],
    ),
    (
        "array-items",
        record({"name": "xs", "type": {"type": "array", "items": "int"}}),
        record({"name": "xs", "type": {"type": "array", "items": "string"}}),
        ["xs[]: the reader expects int, the writer writes string"],
    ),
    (
        "map-values",
        record({"name": "m", "type": {"type": "map", "values": INNER}}),
        record(
            {
                "name": "m",
                "type": {
                    "type": "map",
                    "values": {**INNER, "fields": [{"name": "a", "type": "string"}]},
                },
            }
        ),
        ["m{}.a: the reader expects int, the writer writes string"],
    ),
    (
        "several-problems-each-at-its-place",
        record(
            {"name": "a", "type": "int"},
            {"name": "b", "type": "boolean"},
            {"name": "c", "type": "string"},
        ),
        record({"name": "a", "type": "double"}, {"name": "b", "type": "boolean"}),
        [
            "a: the reader expects int, the writer writes double",
            "c: the reader's field 'c' has no default and the writer does not write it "
            "(give the field a default)",
        ],
    ),
]


@pytest.mark.parametrize(("case", "reader", "writer", "expected"), CASES, ids=[c[0] for c in CASES])
def test_compatibility_problems(
    make_schema: Make,
    case: str,
    reader: dict[str, Any],
    writer: dict[str, Any],
    expected: list[str],
) -> None:
    assert (
        compatibility_problems(reader=make_schema(reader), writer=make_schema(writer)) == expected
    )


@pytest.mark.parametrize(("case", "reader", "writer", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_verdict_agrees_with_the_reference_checker(
    make_schema: Make,
    case: str,
    reader: dict[str, Any],
    writer: dict[str, Any],
    expected: list[str],
) -> None:
    ours = not compatibility_problems(reader=make_schema(reader), writer=make_schema(writer))
    result = ReaderWriterCompatibilityChecker().get_compatibility(  # type: ignore[no-untyped-call]
        avro.schema.parse(json.dumps(make_schema(reader).raw)),
        avro.schema.parse(json.dumps(make_schema(writer).raw)),
    )
    assert ours == (result.compatibility is SchemaCompatibilityType.compatible)
