"""The field table (`schema.fields`): one declaration, and the forms made from it.

The Application's own classes are held to it in `tests/operator/k8s/test_k8s_spec_fields.py`;
here are the table's rules, on small spec classes of the test's own.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from streamflow.schema import fields
from streamflow.schema.fields import NAME_IN_MAPPING, camel_case, declared


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Ref:
    """A value written as text (as a topic's `streamlet.port` references are)."""

    text: str

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str) -> Ref:
        if "." not in text:
            raise ValueError(f"{text!r} is not of the form a.b")
        return cls(text)


@dataclass(frozen=True)
class Inner:
    max_items: int = field(default=10, metadata=declared("At most.", minimum=1))
    colour: Colour | None = field(default=None, metadata=declared("A colour."))


@dataclass(frozen=True)
class Section:
    name: str = field(metadata=NAME_IN_MAPPING)
    class_path: str = field(metadata=declared("The class.", key="class", required=True))
    refs: tuple[Ref, ...] = field(default=(), metadata=declared("Refs.", parse=Ref.parse))
    config: Mapping[str, str] = field(default_factory=dict, metadata=declared("Data."))
    stall_after: float | None = field(
        default=None, metadata=declared("Seconds.", omit_default=True, minimum=5)
    )
    inner: Inner = field(default=Inner(), metadata=declared("Nested.", omit_default=True))


@dataclass(frozen=True)
class Top:
    name: str = field(metadata=declared("Its name.", required=True))
    sections: Mapping[str, Section] = field(metadata=declared("By name.", keyed_by="name"))
    schema_paths: tuple[str, ...] = field(
        default=(), metadata=declared("Paths.", blueprint="schemas")
    )
    source: str = field(default="", metadata=declared("Where it came from.", blueprint=None))
    _cache: dict[str, str] = field(default_factory=dict, compare=False)


def _top() -> Top:
    section = Section(
        name="scorer",
        class_path="m:C",
        refs=(Ref("a.b"),),
        config={"max_items": "3"},
        stall_after=30.0,
        inner=Inner(max_items=2, colour=Colour.BLUE),
    )
    return Top(name="app", sections={"scorer": section}, schema_paths=("s",), source="bp.yaml")


def test_the_plain_form_round_trips_under_either_naming() -> None:
    top = _top()
    for naming in (fields.snake_case, camel_case):
        assert fields.from_plain(Top, fields.to_plain(top, naming=naming), naming=naming) == top


def test_only_fields_are_renamed_never_the_keys_of_data() -> None:
    plain = fields.to_plain(_top(), naming=camel_case)
    section = plain["sections"]["scorer"]
    assert set(plain) == {"name", "sections", "schemaPaths", "source"}
    assert section["stallAfter"] == 30.0 and section["inner"] == {"maxItems": 2, "colour": "blue"}
    assert section["config"] == {"max_items": "3"}  # data: as written
    assert section["refs"] == ["a.b"] and "name" not in section  # the name is the mapping's key


def test_a_field_at_its_default_is_left_out_only_where_declared() -> None:
    section = Section(name="s", class_path="m:C")
    plain = fields.to_plain(section)
    assert plain == {"class": "m:C", "refs": [], "config": {}}
    assert fields.from_plain(Section, plain, name="s") == section


def test_missing_and_null_fields_take_their_defaults_and_a_required_one_is_named() -> None:
    top = fields.from_plain(Top, {"name": "a", "sections": {"s": {"class": "m:C", "config": None}}})
    assert top.sections["s"].config == {} and top.schema_paths == ()
    with pytest.raises(KeyError, match="class"):
        fields.from_plain(Top, {"name": "a", "sections": {"s": {"config": {}}}})
    with pytest.raises(KeyError, match="sections"):
        fields.from_plain(Top, {"name": "a"})


@pytest.mark.parametrize(
    ("section", "error"),
    [
        ({"class": "m:C", "refs": "a.b"}, TypeError),  # one text where a list belongs
        ({"class": "m:C", "refs": ["nodot"]}, ValueError),  # the item's own parse refuses it
        ({"class": "m:C", "inner": {"colour": "green"}}, ValueError),  # not a Colour
        ({"class": "m:C", "inner": ["x"]}, TypeError),
        ({"class": "m:C", "config": ["x"]}, TypeError),
    ],
)
def test_a_malformed_value_is_refused(section: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        fields.from_plain(Top, {"name": "a", "sections": {"s": section}})


def test_the_blueprint_names_and_the_required_ones() -> None:
    assert fields.blueprint_keys(Top) == ("name", "sections", "schemas")
    assert fields.required_keys(Top) == ("name",)
    assert fields.required_keys(Section) == ("class",)


def test_the_openapi_schema_follows_the_types_and_declarations() -> None:
    schema = fields.openapi(Top)
    section = schema["properties"]["sections"]["additionalProperties"]
    assert schema["required"] == ["name"]
    assert set(section["properties"]) == {"class", "refs", "config", "stallAfter", "inner"}
    assert section["properties"]["stallAfter"] == {
        "type": "number",
        "nullable": True,
        "minimum": 5,
        "description": "Seconds.",
    }
    assert section["properties"]["refs"]["items"] == {"type": "string"}
    inner = section["properties"]["inner"]["properties"]
    assert inner["maxItems"]["type"] == "integer"
    # a nullable enum says its values with a pattern (an enum would have to list null)
    assert inner["colour"] == {
        "type": "string",
        "pattern": "^(red|blue)$",
        "nullable": True,
        "description": "A colour.",
    }


def test_a_field_without_a_declaration_is_refused_by_name() -> None:
    @dataclass(frozen=True)
    class Forgotten:
        kept: int = field(default=1, metadata=declared("Kept."))
        added: int = 2

    with pytest.raises(TypeError, match=r"Forgotten\.added is not declared"):
        fields.table(Forgotten)


def test_spec_paths_rename_fields_and_keep_names_and_data() -> None:
    def path(parents: tuple[str, ...], key: str) -> str:
        return fields.spec_path(Top, parents, key, naming=camel_case)

    assert path((), "schema_paths") == "schemaPaths"
    assert path(("sections", "my_scorer"), "stall_after") == "stallAfter"
    assert path(("sections", "my_scorer", "inner"), "max_items") == "maxItems"
    assert path(("sections",), "my_scorer") == "my_scorer"  # a section's name
    assert path(("sections", "s", "config"), "max_items") == "max_items"  # data


def test_an_error_in_a_section_names_its_path_as_the_naming_spells_it() -> None:
    spec = {"name": "a", "sections": {"scorer": {"class": "m:C", "stallAfter": "soon"}}}
    with pytest.raises(ValueError, match=r"^sections\.scorer: could not convert"):
        fields.from_plain(Top, spec, naming=camel_case)
    with pytest.raises(TypeError, match=r"^sections\.scorer: refs must be a list, got str"):
        fields.from_plain(
            Top, {"name": "a", "sections": {"scorer": {"class": "m:C", "refs": "a.b"}}}
        )
    with pytest.raises(KeyError, match=r"sections\.scorer\.class"):
        fields.from_plain(Top, {"name": "a", "sections": {"scorer": {}}})
    with pytest.raises(TypeError, match=r"^sections\.scorer must be a mapping, got list"):
        fields.from_plain(Top, {"name": "a", "sections": {"scorer": ["class"]}})


def test_text_config_values_are_written_as_kafka_spells_them() -> None:
    top = fields.from_plain(
        Top, {"name": "a", "sections": {"s": {"class": "m:C", "config": {"x": True, "n": 5}}}}
    )
    assert top.sections["s"].config == {"x": "true", "n": "5"}


def test_each_schema_is_the_callers_to_change() -> None:
    shared = {"x-kubernetes-int-or-string": True}

    @dataclass(frozen=True)
    class Config:
        config: Mapping[str, str] = field(
            default_factory=dict,
            metadata=declared("Data.", openapi={"additionalProperties": shared}),
        )

    first = fields.openapi(Config)
    first["properties"]["config"]["additionalProperties"]["pattern"] = "^x$"
    again = fields.openapi(Config)
    assert (
        again["properties"]["config"]["additionalProperties"]
        == shared
        == {"x-kubernetes-int-or-string": True}
    )
