"""Binding the generic built-ins to a schema: subclasses, ``for_schema``, and the schema store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from streamflow import Inlet, Outlet
from streamflow.api import Context, describe, load_streamlet_class
from streamflow.api.descriptor import DeclarationError
from streamflow.schema import SchemaStore
from streamflow.streamlets import io
from streamflow.streamlets.io import _binding

ROOT = Path(__file__).parents[3]  # the checkout, where the module path tests.streamlets... starts
GENERICS = [io.Generator, io.FileIngress, io.FileEgress, io.ConsoleEgress, io.HttpIngress]

WineFeed = io.Generator.for_schema("iotest.Reading", name="WineFeed")
Printer = io.ConsoleEgress.for_schema("iotest.Reading", name="Printer")


@pytest.mark.parametrize("base", GENERICS, ids=lambda c: c.__name__)
def test_the_bases_do_not_describe_until_bound(base: type[_binding.SchemaBound]) -> None:
    with pytest.raises(DeclarationError, match="has no schema"):
        describe(base)  # type: ignore[arg-type]


@pytest.mark.parametrize("base", GENERICS, ids=lambda c: c.__name__)
def test_for_schema_binds_the_generic_port(base: type[_binding.SchemaBound]) -> None:
    bound = base.for_schema("iotest.Reading")
    descriptor = describe(bound)  # type: ignore[arg-type]
    ports = [*descriptor.inlets, *descriptor.outlets]
    assert [(p.name, p.schema) for p in ports] == [(ports[0].name, "iotest.Reading")]
    assert ports[0].name in ("in", "out")
    assert bound.__name__ == f"Reading{base.__name__}"
    assert bound.__module__ == __name__
    assert issubclass(bound, base)


def test_a_module_level_for_schema_class_loads_by_its_path() -> None:
    assert sys.modules[__name__] is not None
    path = f"{__name__}:WineFeed"
    assert describe(WineFeed).class_path == path
    assert load_streamlet_class(path, python_paths=[ROOT]) is WineFeed
    assert describe(Printer).inlets[0].name == "in"


def test_a_hand_written_subclass_is_equivalent() -> None:
    class Sink(io.FileEgress):
        in_ = Inlet("in", "iotest.Reading")

    class Feed(io.HttpIngress):
        out = Outlet("out", "iotest.Reading")

    assert describe(Sink).inlets[0].schema == "iotest.Reading"
    assert describe(Feed).outlets[0].schema == "iotest.Reading"


def test_for_schema_keeps_the_outlet_key_function() -> None:
    def by_id(value: dict[str, object]) -> str:
        return str(value["id"])

    class Keyed(io.Generator):
        out = Outlet("out", "iotest.Reading", key=by_id)

    assert Keyed.for_schema("iotest.Other").out.key is by_id
    with pytest.raises(ValueError, match="needs a schema"):
        io.Generator.for_schema("")


def test_the_schema_comes_from_the_context_store(store: SchemaStore) -> None:
    context = Context(schema_store=store)
    assert WineFeed().bound_schema(context).name == "iotest.Reading"


def test_without_a_store_the_project_schemas_are_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "schemas").mkdir()
    schema = Path(__file__).parent / "schemas" / "Reading.avsc"
    (tmp_path / "schemas" / "Reading.avsc").write_text(schema.read_text())
    monkeypatch.chdir(tmp_path)
    context = Context()
    assert WineFeed().bound_schema(context).name == "iotest.Reading"
    assert isinstance(context.schema_store, SchemaStore)


def test_an_unknown_schema_is_a_clear_setup_error(store: SchemaStore) -> None:
    context = Context(schema_store=store)
    with pytest.raises(ValueError, match=r"unknown schema 'iotest.Readin'.*did you mean"):
        io.Generator.for_schema("iotest.Readin")().bound_schema(context)


@pytest.mark.parametrize(
    ("value", "key"),
    [(None, None), ("a", "a"), (3, "3"), (2.5, "2.5"), (True, "true"), (b"k", "k")],
)
def test_key_of(value: object, key: str | None) -> None:
    assert _binding.key_of(value) == key
