"""Loading schemas: named types across files, namespaces, and collected problems."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from streamflow.schema import SchemaError, SchemaStore

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "status", "type": "Status"},  # relative: shop.Status, from another file
        {"name": "ship_to", "type": "shop.common.Address"},  # full name, another namespace
        {"name": "bill_to", "type": ["null", "shop.common.Address"], "default": None},
    ],
}
STATUS = {"type": "enum", "name": "Status", "namespace": "shop", "symbols": ["NEW", "SHIPPED"]}
ADDRESS = {
    "type": "record",
    "name": "shop.common.Address",
    "fields": [
        {"name": "city", "type": "string"},
        {
            "name": "geo",
            "type": {
                "type": "record",
                "name": "Geo",
                "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}],
            },
        },
    ],
}


@pytest.fixture
def shop(schema_dir: Callable[..., Path]) -> SchemaStore:
    # "a_order" sorts before the files it depends on: references resolve after loading.
    root = schema_dir({"a_order.avsc": ORDER, "b/status.avsc": STATUS, "c/address.avsc": ADDRESS})
    return SchemaStore([root], include_builtin=False)


def test_a_record_uses_types_defined_in_other_files(shop: SchemaStore) -> None:
    assert shop.problems == []
    order = shop.get("shop.Order")
    status, ship_to, bill_to = (f["type"] for f in order.raw["fields"][1:])
    assert status["type"] == "enum" and status["name"] == "shop.Status"
    assert ship_to["name"] == "shop.common.Address"
    # each named type is defined once, at its first use, and referenced after that
    assert bill_to == ["null", "shop.common.Address"]
    assert order.field_names() == ["id", "status", "ship_to", "bill_to"]


def test_nested_types_take_the_enclosing_namespace(shop: SchemaStore) -> None:
    assert "shop.common.Geo" in shop
    assert shop.get("shop.common.Geo").field_names() == ["lat", "lon"]
    assert set(shop.names()) == {
        "shop.Order",
        "shop.Status",
        "shop.common.Address",
        "shop.common.Geo",
    }


def test_an_explicit_namespace_overrides_the_enclosing_one() -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(
        {
            "type": "record",
            "name": "Outer",
            "namespace": "a",
            "fields": [
                {
                    "name": "x",
                    "type": {"type": "enum", "name": "E", "namespace": "b", "symbols": ["X"]},
                },
                {
                    "name": "y",
                    "type": {"type": "fixed", "name": "c.F", "namespace": "ignored", "size": 2},
                },
                {"name": "z", "type": "b.E"},
            ],
        }
    )
    assert store.problems == []
    assert set(store.names()) == {"a.Outer", "b.E", "c.F"}


def test_a_self_contained_schema_parses_with_fastavro_and_resolves_lazily(
    shop: SchemaStore,
) -> None:
    # fingerprints of every schema are found without first calling get()
    address = shop.get("shop.common.Address")
    fresh = SchemaStore(shop.paths, include_builtin=False)
    assert fresh.by_fingerprint(address.fingerprint) == address


def test_the_builtin_schemas_load() -> None:
    store = SchemaStore()
    assert store.problems == []
    descriptor = store.get("streamflow.ml.ModelDescriptor")
    assert {"name", "version", "kind", "data", "location", "sha256"} <= set(
        descriptor.field_names()
    )
    status = store.get("streamflow.ml.ModelStatus")
    assert "state" in status.field_names()
    assert "streamflow.ml.ModelKind" in store


def test_invalid_json_is_a_problem_with_line_and_column(
    schema_dir: Callable[..., Path],
) -> None:
    root = schema_dir({"bad.avsc": '{\n  "type": "record",\n  "name": "X",,\n}', "ok.avsc": STATUS})
    store = SchemaStore([root], include_builtin=False)
    (problem,) = store.problems
    assert problem.path == root / "bad.avsc"
    assert (problem.line, problem.column) == (3, 15)
    assert "not valid JSON" in str(problem)
    assert str(problem).startswith(f"{root / 'bad.avsc'}:3:15: ")
    assert store.get("shop.Status")  # the good file still loads


def test_an_unknown_type_reference_is_a_problem(schema_dir: Callable[..., Path]) -> None:
    root = schema_dir({"order.avsc": ORDER, "status.avsc": STATUS})  # no Address
    store = SchemaStore([root], include_builtin=False)
    (problem,) = store.problems
    assert "shop.Order refers to unknown type 'shop.common.Address'" in problem.message
    assert problem.path == root / "order.avsc"
    with pytest.raises(SchemaError, match=re.escape("unknown type 'shop.common.Address'")):
        store.get("shop.Order")


def test_a_record_without_fields_is_a_problem_located_at_its_name(
    schema_dir: Callable[..., Path],
) -> None:
    root = schema_dir({"x.avsc": '{\n  "type": "record",\n  "name": "a.NoFields"\n}'})
    store = SchemaStore([root], include_builtin=False)
    (problem,) = store.problems
    assert problem.message == "record a.NoFields needs a 'fields' list"
    assert problem.line == 3


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"type": "enum", "name": "a.E", "symbols": "A"}, "enum a.E needs a 'symbols' list"),
        ({"type": "enum", "name": "a.E", "symbols": ["A", "A"]}, "a.E is not a valid Avro schema"),
        ({"type": "fixed", "name": "a.F"}, "a.F is not a valid Avro schema"),
        (
            {"type": "record", "name": "a.R", "fields": [{"name": "x"}]},
            "needs a 'name' and a 'type'",
        ),
        ({"type": "record", "fields": []}, "needs a string 'name'"),
        ({"name": "a.R"}, "needs a 'type'"),
        (42, "must be a name, an object or a union"),
    ],
)
def test_non_avro_documents_are_problems(doc: object, message: str) -> None:
    store = SchemaStore(include_builtin=False)
    store.add_schema(doc)
    assert len(store.problems) == 1
    assert message in str(store.problems[0])


def test_conflicting_definitions_are_a_problem(schema_dir: Callable[..., Path]) -> None:
    other_status = {**STATUS, "symbols": ["NEW"]}
    root = schema_dir({"a.avsc": STATUS, "b.avsc": other_status, "c.avsc": STATUS})
    store = SchemaStore([root], include_builtin=False)
    (problem,) = store.problems  # an identical second definition is fine
    assert problem.path == root / "b.avsc"
    assert problem.message == f"shop.Status is defined differently in {root / 'a.avsc'}"
    assert store.get("shop.Status").raw["symbols"] == ["NEW", "SHIPPED"]  # the first one wins


def test_a_missing_search_path_is_a_problem(tmp_path: Path) -> None:
    store = SchemaStore([tmp_path / "nope"], include_builtin=False)
    assert [p.message for p in store.problems] == [
        f"schema path {str(tmp_path / 'nope')!r} does not exist"
    ]


@pytest.mark.parametrize(
    ("asked", "suggested"),
    [
        ("shop.Ordr", "shop.Order"),  # a typo
        ("Order", "shop.Order"),  # the short name
        ("shop.order", "shop.Order"),  # the wrong case
        ("shop.common.Adress", "shop.common.Address"),
    ],
)
def test_get_of_an_unknown_name_suggests_a_close_one(
    shop: SchemaStore, asked: str, suggested: str
) -> None:
    with pytest.raises(SchemaError) as error:
        shop.get(asked)
    assert str(error.value) == f"unknown schema {asked!r} (did you mean {suggested!r}?)"


def test_get_of_a_far_name_gives_no_suggestion(shop: SchemaStore) -> None:
    with pytest.raises(SchemaError, match=r"^unknown schema 'x\.Quux'$"):
        shop.get("x.Quux")
    assert shop.find("x.Quux") is None
